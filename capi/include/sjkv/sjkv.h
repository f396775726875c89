/* sjkv's C interface to the SJ-KVaRN codec: for engines written in C (ggml) and for FFIs
 * (Rust, ctypes). Opaque handles, error codes with a message, no C++ type across it. The
 * records it writes are the C++ library's bytes (tests/capi). Rows are one KV head's D values;
 * every stored row is in the codec's rotated basis (sjkv_rotate, its own inverse), as the
 * format stores them: an engine rotates K and V before storing and rotates attention outputs
 * back (docs/SPEC.md, "rotation").
 *
 * Thread safety: handles are not shared between threads without the caller's locking; the
 * message of sjkv_last_error is per thread. */
#ifndef SJKV_SJKV_H
#define SJKV_SJKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* The library is built with hidden visibility: what this header declares is its whole ABI. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---- errors ---------------------------------------------------------------------------- */

typedef enum sjkv_error {
  SJKV_OK = 0,
  SJKV_ERR_ARGUMENT = 1,    /* a null pointer, a size or position out of range, a bad config string */
  SJKV_ERR_UNSUPPORTED = 2, /* a configuration the codec cannot serve (the message says why) */
  SJKV_ERR_INPUT = 3,       /* NaN/Inf or fp16 overflow in rows given to store or seal */
  SJKV_ERR_FILE = 4,        /* a codebook file that cannot be read or is damaged */
  SJKV_ERR_STATE = 5,       /* a call out of order (e.g. truncate while a seal is pending) */
  SJKV_ERR_INTERNAL = 6     /* out of memory or a bug */
} sjkv_error;

/* The message of this thread's last failed call ("" when the last call succeeded). */
const char* sjkv_last_error(void);
/* The library's version, e.g. "0.1.0", and the format version it writes (1). */
const char* sjkv_version(void);
uint32_t sjkv_format_version(void);

/* ---- configuration --------------------------------------------------------------------- */

typedef struct sjkv_config sjkv_config;

/* Parses a configuration string of docs/SPEC.md's grammar ("sj:4/4", "sj:3/2t:tail=512/1024",
 * "kvarn:4/4:D=64:staging=q8_0", ...). head_dim: the model's head size, or 0 to keep the
 * string's D (default 128). Fails unless the codec can serve the result (SJKV_ERR_UNSUPPORTED,
 * the message naming the reason). */
sjkv_error sjkv_config_parse(const char* text, uint32_t head_dim, sjkv_config** out);
void sjkv_config_free(sjkv_config* c);

typedef struct sjkv_config_info {
  uint32_t head_dim;     /* D */
  uint32_t group;        /* G, tokens per record */
  uint32_t bits_k, bits_v;
  uint32_t trellis;      /* 1: trellis-coded body, 0: scalar */
  uint32_t sink;         /* positions kept in the 16-bit sink */
  uint32_t tail;         /* exact positions kept after a seal */
  uint32_t tail_max;     /* tail length that triggers a seal (0: a fixed tail) */
  uint32_t rotation;     /* Hadamard block */
  size_t record_bytes;   /* one record: G tokens of one KV head, K and V */
  size_t staging_bytes;  /* one staged row (K or V) of one KV head */
} sjkv_config_info;
void sjkv_config_get(const sjkv_config* c, sjkv_config_info* out);
/* The canonical name (as parse reads it back) into buf; returns its length without the NUL,
 * which is also the size needed (buf may be NULL when size is 0). */
size_t sjkv_config_name(const sjkv_config* c, char* buf, size_t size);

/* The codec's rotation of one row of D values, in place; applying it twice gives the row back. */
void sjkv_rotate(const sjkv_config* c, float* row);

/* ---- trellis tables --------------------------------------------------------------------- */

typedef struct sjkv_codebook sjkv_codebook;

/* Trellis tables from a file as sjkv-train writes them: a raw engine table file (.bin: the K
 * table then the V table of one width), a C header (.h) or an sjkv container (.sjcb); every form
 * is checked (size, entries, hashes). A 3/2t configuration takes the K table of the 3-bit pair
 * and the V table of the 2-bit one: sjkv_codebook_add loads another width into the same handle.
 * A width the handle lacks seals with the format's table on that side. */
sjkv_error sjkv_codebook_load(const char* path, sjkv_codebook** out);
sjkv_error sjkv_codebook_add(sjkv_codebook* cb, const char* path);
void sjkv_codebook_free(sjkv_codebook* cb);
/* 1 when the handle holds the pair of this width (2, 3 or 4). */
int sjkv_codebook_has(const sjkv_codebook* cb, uint32_t bits);
/* The id records of this configuration are sealed under with these tables (FNV-1a-64 over the
 * K then the V table used); 0 for a scalar body. cb may be NULL (the format's tables). */
uint64_t sjkv_codebook_id(const sjkv_config* c, const sjkv_codebook* cb);

/* ---- records and staged rows ------------------------------------------------------------ */

/* Seals one group: G rows of K and of V, each D fp16 bit patterns (rotated, as the cache stages
 * them), row t at rows + t * row_stride, into out (record_bytes). cb: trellis tables of the
 * configuration's widths, or NULL for the format's. */
sjkv_error sjkv_seal_record(const sjkv_config* c, const sjkv_codebook* cb, const uint16_t* k_rows,
                            const uint16_t* v_rows, size_t row_stride, uint8_t* out);
/* Row t (0..G-1) of a record into k_out and v_out (D floats each; either may be NULL). cb: the
 * tables it was sealed with (NULL: the format's). */
sjkv_error sjkv_decode_record_row(const sjkv_config* c, const sjkv_codebook* cb, const uint8_t* rec, uint32_t t,
                                  float* k_out, float* v_out);
/* One row of D values into the configuration's staging format (staging_bytes), and back. */
sjkv_error sjkv_stage_row(const sjkv_config* c, const float* row, uint8_t* out);
sjkv_error sjkv_unstage_row(const sjkv_config* c, const uint8_t* in, float* out);

/* ---- the journal policy (docs/SPEC.md 9.4-9.5): when the exact tail is sealed ------------- */

/* Plain state an engine keeps per sequence (the format's nine u32 fields, in its order). */
typedef struct sjkv_policy {
  uint32_t sink, tail, tail_max, group, flush_chunk, B, B_prev, B_pending, draining;
} sjkv_policy;
#define SJKV_NO_POS 0xFFFFFFFFu

void sjkv_policy_init(sjkv_policy* p, const sjkv_config* c);
/* Before a ubatch of n_tokens at pos0: the seal target. Seal groups [p->B, target), then commit. */
uint32_t sjkv_policy_seal_target(sjkv_policy* p, uint32_t pos0, uint32_t n_tokens);
void sjkv_policy_commit(sjkv_policy* p);
/* Between requests, with `end` positions stored: the seal target keeping at least keep_recent
 * recent positions exact (p->B when there is nothing to seal); seal, then commit. */
uint32_t sjkv_policy_idle(sjkv_policy* p, uint32_t end, uint32_t keep_recent);
/* Cuts the sequence at pos: returns where to resume (keep [0, r), re-prefill from r) and the
 * records dropped; SJKV_NO_POS while a seal is pending. */
uint32_t sjkv_policy_truncate(sjkv_policy* p, uint32_t pos, uint32_t* n_dropped);
/* Staging-ring rows a cache needs for ubatches of at most n_ubatch. */
uint32_t sjkv_ring_capacity(const sjkv_config* c, uint32_t n_ubatch);

/* ---- a sequence's cache: sink, staging ring, sealed body, driven by the policy ---------- */

typedef struct sjkv_cache sjkv_cache;

/* A cache of n_layers x n_head_kv heads for positions [0, n_ctx) in ubatches of at most
 * n_ubatch. cb: trellis tables (NULL: the format's); the cache keeps its own copy. */
sjkv_error sjkv_cache_new(const sjkv_config* c, const sjkv_codebook* cb, uint32_t n_layers, uint32_t n_head_kv,
                          uint32_t n_ctx, uint32_t n_ubatch, sjkv_cache** out);
void sjkv_cache_free(sjkv_cache* cache);
/* Before a ubatch of n positions at pos0 (every earlier position stored): the policy's step,
 * sealing what it says. groups_sealed (may be NULL): groups sealed per layer and head. */
sjkv_error sjkv_cache_begin_ubatch(sjkv_cache* cache, uint32_t pos0, uint32_t n, uint32_t* groups_sealed);
/* Positions [pos0, pos0 + n): rotated rows [n][n_layers][n_head_kv][D] of K and of V. Nothing
 * is stored unless every value is accepted. */
sjkv_error sjkv_cache_store(sjkv_cache* cache, uint32_t pos0, uint32_t n, const float* k, const float* v);
/* The idle step between requests: seal back to the tail, keeping keep_recent positions exact. */
sjkv_error sjkv_cache_idle(sjkv_cache* cache, uint32_t keep_recent, uint32_t* groups_sealed);
uint32_t sjkv_cache_n_stored(const sjkv_cache* cache);
uint32_t sjkv_cache_sealed_end(const sjkv_cache* cache); /* B: [sink, B) is in records */
/* K and V of position pos of one layer and KV head as the cache holds them (D floats each,
 * rotated basis; either may be NULL). */
sjkv_error sjkv_cache_read(const sjkv_cache* cache, uint32_t layer, uint32_t head, uint32_t pos, float* k_out,
                           float* v_out);
/* Bits per value over the stored positions: what they occupy (sink, records, ring rows). */
double sjkv_cache_bits(const sjkv_cache* cache);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif

#endif /* SJKV_SJKV_H */
