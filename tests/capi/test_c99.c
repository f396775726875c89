/* A C99 program against sjkv/sjkv.h: parse, seal and decode a record, run a cache over a few
 * ubatches and read it back. Exit 0 on success, 1 with a line on stderr otherwise. Built in
 * the tree (tests/capi) and, by .ci/run, against the installed package. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sjkv/sjkv.h"

static int failed(const char* what) {
  fprintf(stderr, "test_c99: %s: %s\n", what, sjkv_last_error());
  return 1;
}

int main(void) {
  sjkv_config *c = NULL, *bad = NULL;
  sjkv_config_info info;
  char name[256];
  uint32_t L = 1, H = 2, D = 128, N = 900, U = 100, p0, i;
  sjkv_cache* cache = NULL;
  float *k, *v, row[128];
  double err = 0.0, ref = 0.0;

  if (sjkv_config_parse("sj:4/4:tail=256/512", D, &c) != SJKV_OK) return failed("parse");
  sjkv_config_get(c, &info);
  sjkv_config_name(c, name, sizeof name);
  if (sjkv_config_parse("sj:4/4:frob=1", 0, &bad) != SJKV_ERR_ARGUMENT || bad != NULL || strlen(sjkv_last_error()) == 0) {
    fprintf(stderr, "test_c99: a bad configuration was accepted\n");
    return 1;
  }
  if (sjkv_cache_new(c, NULL, L, H, N, U, &cache) != SJKV_OK) return failed("cache");
  k = malloc(sizeof(float) * U * L * H * D);
  v = malloc(sizeof(float) * U * L * H * D);
  if (!k || !v) return 1;
  for (p0 = 0; p0 < N; p0 += U) {
    for (i = 0; i < U * L * H * D; ++i) {
      k[i] = (float)sin(0.001 * (double)(p0 * 977 + i * 13));
      v[i] = (float)cos(0.002 * (double)(p0 * 31 + i * 7));
    }
    if (sjkv_cache_begin_ubatch(cache, p0, U, NULL) != SJKV_OK) return failed("begin_ubatch");
    if (sjkv_cache_store(cache, p0, U, k, v) != SJKV_OK) return failed("store");
  }
  /* The last ubatch's first position, head 1, against what was stored (staged: close). */
  if (sjkv_cache_read(cache, 0, 1, N - U, row, NULL) != SJKV_OK) return failed("read");
  for (i = 0; i < D; ++i) {
    err += fabs((double)row[i] - (double)k[(size_t)1 * D + i]);
    ref += fabs((double)k[(size_t)1 * D + i]);
  }
  printf("%s: record %zu bytes, staged row %zu bytes; %u positions, sealed end %u, %.3f bits a value, "
         "staged row error %.4f of its magnitude\n",
         name, info.record_bytes, info.staging_bytes, sjkv_cache_n_stored(cache), sjkv_cache_sealed_end(cache),
         sjkv_cache_bits(cache), err / ref);
  if (sjkv_cache_sealed_end(cache) <= info.sink || err / ref > 0.05) {
    fprintf(stderr, "test_c99: nothing sealed or a row far from what was stored\n");
    return 1;
  }
  free(k);
  free(v);
  sjkv_cache_free(cache);
  sjkv_config_free(c);
  return 0;
}
