// The C interface (sjkv/sjkv.h) over the codec's C++ library: each call converts its arguments,
// calls the library and turns a Status or an exception into an error code and this thread's
// message. No codec logic lives here.
#include "sjkv/sjkv.h"

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/config.h"
#include "sjkv/hadamard.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/file_error.h"
#include "sjkv/policy.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/trellis.h"

struct sjkv_config {
  sjkv::CodecConfig cfg;
};

struct sjkv_codebook : sjkv::CodebookPairs {};  // one pair per width

struct sjkv_cache {
  sjkv_codebook tables;  // the cache's own copy: the seal options point into it
  std::unique_ptr<sjkv::SequenceCache> seq;
};

namespace {

thread_local std::string g_error;

sjkv_error fail(sjkv_error e, const std::string& msg) {
  g_error = msg;
  return e;
}
sjkv_error ok() {
  g_error.clear();
  return SJKV_OK;
}
sjkv_error from_status(const sjkv::Status& st) {
  if (st.ok()) return ok();
  const bool input = st.code == sjkv::ErrorCode::non_finite_input || st.code == sjkv::ErrorCode::fp16_overflow;
  return fail(input ? SJKV_ERR_INPUT : SJKV_ERR_UNSUPPORTED, st.message());
}
// Runs f, mapping exceptions to codes (nothing may unwind into C).
template <class F>
sjkv_error guarded(F&& f) {
  try {
    return f();
  } catch (const sjkv::FileError& e) {
    return fail(SJKV_ERR_FILE, e.what());
  } catch (const std::bad_alloc&) {
    return fail(SJKV_ERR_INTERNAL, "out of memory");
  } catch (const std::invalid_argument& e) {
    return fail(SJKV_ERR_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return fail(SJKV_ERR_INTERNAL, e.what());
  }
}

// The tables a configuration seals with (null: the format's).
sjkv::TrellisCodebooks tables_for(const sjkv::CodecConfig& c, const sjkv_codebook* cb) {
  if (!cb || c.resolved_body() != sjkv::Body::trellis) return {};
  return cb->tables(c.bits_k, c.bits_v);
}

sjkv::SealOptions seal_options(const sjkv::CodecConfig& c, const sjkv_codebook* cb) {
  sjkv::SealOptions so;
  so.iters = c.iters;
  so.balance = c.balance;
  so.codebooks = tables_for(c, cb);
  return so;
}

sjkv::RawCodebook read_pair(const char* path) { return sjkv::read_codebook_any(path).table; }

}  // namespace

extern "C" {

const char* sjkv_last_error(void) { return g_error.c_str(); }
const char* sjkv_version(void) { return SJKV_VERSION_STRING; }
uint32_t sjkv_format_version(void) { return 1; }

sjkv_error sjkv_config_parse(const char* text, uint32_t head_dim, sjkv_config** out) {
  if (!text || !out) return fail(SJKV_ERR_ARGUMENT, "sjkv_config_parse: null argument");
  *out = nullptr;
  return guarded([&] {
    sjkv::CodecConfig c;
    std::string err;
    if (!sjkv::parse_config(text, &c, &err)) return fail(SJKV_ERR_ARGUMENT, "'" + std::string(text) + "': " + err);
    if (head_dim) c.head_dim = head_dim;
    const sjkv::Unsupported why = sjkv::can_implement(c);
    if (why != sjkv::Unsupported::none)
      return fail(SJKV_ERR_UNSUPPORTED, c.name() + ": " + sjkv::describe(why));
    *out = new sjkv_config{c};
    return ok();
  });
}

void sjkv_config_free(sjkv_config* c) { delete c; }

void sjkv_config_get(const sjkv_config* c, sjkv_config_info* out) {
  if (!c || !out) return;
  const sjkv::CodecConfig& g = c->cfg;
  out->head_dim = g.head_dim;
  out->group = g.group;
  out->bits_k = g.bits_k;
  out->bits_v = g.bits_v;
  out->trellis = g.resolved_body() == sjkv::Body::trellis;
  out->sink = g.sink;
  out->tail = g.tail;
  out->tail_max = g.tail_max;
  out->rotation = g.rotation();
  out->record_bytes = g.layout().bytes;
  out->staging_bytes = sjkv::staging_row_bytes(g.staging, g.head_dim);
}

size_t sjkv_config_name(const sjkv_config* c, char* buf, size_t size) {
  if (!c) return 0;
  const std::string n = c->cfg.name();
  if (buf && size) {
    const size_t m = n.size() < size - 1 ? n.size() : size - 1;
    std::memcpy(buf, n.data(), m);
    buf[m] = '\0';
  }
  return n.size();
}

void sjkv_rotate(const sjkv_config* c, float* row) {
  if (c && row) sjkv::hadamard_blocks(row, c->cfg.head_dim, c->cfg.rotation());
}

sjkv_error sjkv_codebook_load(const char* path, sjkv_codebook** out) {
  if (!path || !out) return fail(SJKV_ERR_ARGUMENT, "sjkv_codebook_load: null argument");
  *out = nullptr;
  return guarded([&] {
    auto cb = std::make_unique<sjkv_codebook>();
    cb->pairs.push_back(read_pair(path));
    *out = cb.release();
    return ok();
  });
}

sjkv_error sjkv_codebook_add(sjkv_codebook* cb, const char* path) {
  if (!cb || !path) return fail(SJKV_ERR_ARGUMENT, "sjkv_codebook_add: null argument");
  return guarded([&] {
    sjkv::RawCodebook r = read_pair(path);
    if (cb->of(r.bits))
      return fail(SJKV_ERR_ARGUMENT, std::string(path) + ": the handle already holds " + std::to_string(r.bits) + "-bit tables");
    cb->pairs.push_back(std::move(r));
    return ok();
  });
}

void sjkv_codebook_free(sjkv_codebook* cb) { delete cb; }

int sjkv_codebook_has(const sjkv_codebook* cb, uint32_t bits) { return cb && cb->of(bits) ? 1 : 0; }

uint64_t sjkv_codebook_id(const sjkv_config* c, const sjkv_codebook* cb) {
  if (!c) return 0;
  return sjkv::codebook_id(c->cfg.layout(), tables_for(c->cfg, cb));
}

sjkv_error sjkv_seal_record(const sjkv_config* c, const sjkv_codebook* cb, const uint16_t* k_rows,
                            const uint16_t* v_rows, size_t row_stride, uint8_t* out) {
  if (!c || !k_rows || !v_rows || !out) return fail(SJKV_ERR_ARGUMENT, "sjkv_seal_record: null argument");
  if (row_stride < c->cfg.head_dim) return fail(SJKV_ERR_ARGUMENT, "sjkv_seal_record: row_stride below head_dim");
  return guarded([&] {
    thread_local sjkv::SealWorkspace ws;
    return from_status(sjkv::seal_record(c->cfg.layout(), seal_options(c->cfg, cb), k_rows, v_rows, row_stride, out, ws));
  });
}

sjkv_error sjkv_decode_record_row(const sjkv_config* c, const sjkv_codebook* cb, const uint8_t* rec, uint32_t t,
                                  float* k_out, float* v_out) {
  if (!c || !rec) return fail(SJKV_ERR_ARGUMENT, "sjkv_decode_record_row: null argument");
  if (t >= c->cfg.group) return fail(SJKV_ERR_ARGUMENT, "sjkv_decode_record_row: row past the group");
  const sjkv::RecordLayout l = c->cfg.layout();
  const sjkv::TrellisCodebooks tb = tables_for(c->cfg, cb);
  if (k_out) sjkv::decode_k_row(l, rec, t, k_out, tb);
  if (v_out) sjkv::decode_v_row(l, rec, t, v_out, tb);
  return ok();
}

sjkv_error sjkv_stage_row(const sjkv_config* c, const float* row, uint8_t* out) {
  if (!c || !row || !out) return fail(SJKV_ERR_ARGUMENT, "sjkv_stage_row: null argument");
  const int32_t bad = sjkv::staging_encode_row_checked(c->cfg.staging, row, c->cfg.head_dim, out);
  if (bad >= 0)
    return fail(SJKV_ERR_INPUT, "sjkv_stage_row: value " + std::to_string(bad) + " is not finite or overflows " +
                                    sjkv::staging_name(c->cfg.staging));
  return ok();
}

sjkv_error sjkv_unstage_row(const sjkv_config* c, const uint8_t* in, float* out) {
  if (!c || !in || !out) return fail(SJKV_ERR_ARGUMENT, "sjkv_unstage_row: null argument");
  sjkv::staging_decode_row(c->cfg.staging, in, c->cfg.head_dim, out);
  return ok();
}

// sjkv_policy is the format's JournalPolicy field for field (asserted below).
static_assert(sizeof(sjkv_policy) == sizeof(sjkv::JournalPolicy), "sjkv_policy mirrors JournalPolicy");
namespace {
sjkv::JournalPolicy* as_policy(sjkv_policy* p) { return reinterpret_cast<sjkv::JournalPolicy*>(p); }
}  // namespace

void sjkv_policy_init(sjkv_policy* p, const sjkv_config* c) {
  if (!p || !c) return;
  as_policy(p)->init(c->cfg.sink, c->cfg.tail, c->cfg.tail_max, c->cfg.group, c->cfg.flush_chunk);
}
uint32_t sjkv_policy_seal_target(sjkv_policy* p, uint32_t pos0, uint32_t n_tokens) {
  return p ? as_policy(p)->begin_ubatch(pos0, n_tokens) : SJKV_NO_POS;
}
void sjkv_policy_commit(sjkv_policy* p) {
  if (p) as_policy(p)->commit();
}
uint32_t sjkv_policy_idle(sjkv_policy* p, uint32_t end, uint32_t keep_recent) {
  return p ? as_policy(p)->idle(end, keep_recent) : SJKV_NO_POS;
}
uint32_t sjkv_policy_truncate(sjkv_policy* p, uint32_t pos, uint32_t* n_dropped) {
  return p ? as_policy(p)->truncate(pos, n_dropped) : SJKV_NO_POS;
}
uint32_t sjkv_ring_capacity(const sjkv_config* c, uint32_t n_ubatch) {
  if (!c || !sjkv::ring_capacity_valid(c->cfg.tail, c->cfg.tail_max, c->cfg.group, n_ubatch)) return 0;
  return sjkv::ring_capacity(c->cfg.tail, c->cfg.tail_max, c->cfg.group, n_ubatch);
}

sjkv_error sjkv_cache_new(const sjkv_config* c, const sjkv_codebook* cb, uint32_t n_layers, uint32_t n_head_kv,
                          uint32_t n_ctx, uint32_t n_ubatch, sjkv_cache** out) {
  if (!c || !out) return fail(SJKV_ERR_ARGUMENT, "sjkv_cache_new: null argument");
  *out = nullptr;
  return guarded([&] {
    auto cache = std::make_unique<sjkv_cache>();
    if (cb) cache->tables = *cb;
    sjkv::CacheShape shape;
    shape.n_layers = n_layers;
    shape.n_head_kv = n_head_kv;
    shape.n_ctx = n_ctx;
    shape.n_ubatch = n_ubatch;
    cache->seq = std::make_unique<sjkv::SequenceCache>(c->cfg, shape, seal_options(c->cfg, cb ? &cache->tables : nullptr));
    if (!cache->seq->status().ok()) return from_status(cache->seq->status());
    *out = cache.release();
    return ok();
  });
}

void sjkv_cache_free(sjkv_cache* cache) { delete cache; }

sjkv_error sjkv_cache_begin_ubatch(sjkv_cache* cache, uint32_t pos0, uint32_t n, uint32_t* groups_sealed) {
  if (!cache) return fail(SJKV_ERR_ARGUMENT, "sjkv_cache_begin_ubatch: null cache");
  return guarded([&] { return from_status(cache->seq->begin_ubatch(pos0, n, groups_sealed)); });
}

sjkv_error sjkv_cache_store(sjkv_cache* cache, uint32_t pos0, uint32_t n, const float* k, const float* v) {
  if (!cache || !k || !v) return fail(SJKV_ERR_ARGUMENT, "sjkv_cache_store: null argument");
  if (pos0 != cache->seq->n_stored())
    return fail(SJKV_ERR_STATE, "sjkv_cache_store: position " + std::to_string(pos0) + ", expected " +
                                    std::to_string(cache->seq->n_stored()));
  return guarded([&] { return from_status(cache->seq->store_ubatch(pos0, n, k, v)); });
}

sjkv_error sjkv_cache_idle(sjkv_cache* cache, uint32_t keep_recent, uint32_t* groups_sealed) {
  if (!cache) return fail(SJKV_ERR_ARGUMENT, "sjkv_cache_idle: null cache");
  return guarded([&] { return from_status(cache->seq->idle(keep_recent, groups_sealed)); });
}

uint32_t sjkv_cache_n_stored(const sjkv_cache* cache) { return cache ? cache->seq->n_stored() : 0; }
uint32_t sjkv_cache_sealed_end(const sjkv_cache* cache) { return cache ? cache->seq->policy().B : 0; }

sjkv_error sjkv_cache_read(const sjkv_cache* cache, uint32_t layer, uint32_t head, uint32_t pos, float* k_out,
                           float* v_out) {
  if (!cache) return fail(SJKV_ERR_ARGUMENT, "sjkv_cache_read: null cache");
  const sjkv::CacheShape& sh = cache->seq->shape();
  if (layer >= sh.n_layers || head >= sh.n_head_kv || pos >= cache->seq->n_stored())
    return fail(SJKV_ERR_ARGUMENT, "sjkv_cache_read: layer, head or position out of range");
  // resolve_row writes both sides: a side the caller does not want goes to scratch.
  thread_local std::vector<float> scratch;
  scratch.resize(cache->seq->config().head_dim);
  sjkv::resolve_row(cache->seq->view(layer), pos, head, k_out ? k_out : scratch.data(), v_out ? v_out : scratch.data());
  return ok();
}

double sjkv_cache_bits(const sjkv_cache* cache) {
  if (!cache || cache->seq->n_stored() == 0) return 0.0;
  return sjkv::occupied_bits(cache->seq->config(), cache->seq->policy().B, cache->seq->n_stored()).total_bits();
}

}  // extern "C"
