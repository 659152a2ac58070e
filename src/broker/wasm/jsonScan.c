/*
 * The telemetry check (see jsonScan.ts, which loads it): whether a payload is a JSON object that
 * PostgreSQL stores as jsonb, within the gateway's limits, and the signature of its top-level keys.
 * WebAssembly with 128-bit SIMD: the runs of a string, a key, a number and digits are found 16
 * bytes per step (one compare per class of byte, a bitmask, count trailing zeros). Problem codes
 * are those of jsonScan.ts (PROBLEM), the first one met from the left.
 *
 * The limits below are payload.ts's MAX_JSON_BYTES and MAX_JSON_DEPTH.
 *
 * Built by `npm run build:wasm` (clang-14 and lld-14, Debian's packages) into jsonScan.wasm, which
 * is committed: installing and running the gateway needs no C compiler
 * (test/broker/payloadCheck.test.ts checks that the committed module is this file's build).
 *
 * Memory: the caller writes the payload at payload(); scan() writes 32 zero bytes after it (a
 * sentinel: a zero ends every run, and no read goes further than 16 bytes past the first of them).
 * No allocation: the module's memory never grows, so the caller's view of it stays valid.
 */
#include <stdint.h>
#include <wasm_simd128.h>

#define MAX_JSON_BYTES (64 * 1024)
#define MAX_JSON_DEPTH 64
#define MAX_NUMBER_CHARS 1000
#define MAX_EXPONENT 9999

#define NOT_JSON -1
#define NOT_OBJECT -2
#define TOO_DEEP -3
#define NUL -4
#define LONE_SURROGATE -5
#define OUT_OF_RANGE -6

static uint8_t S[MAX_JSON_BYTES + 64] __attribute__((aligned(16)));
static uint8_t objects[MAX_JSON_DEPTH + 2];
static int len;
/** 1 when the payload holds a byte >= 0x80 (the caller then checks UTF-8); read by the caller at highBytes() */
static uint8_t high;

__attribute__((export_name("payload"))) uint8_t *payload(void) { return S; }
/** the limits this build was made with (jsonScan.ts refuses to load a module whose limits differ from payload.ts's) */
__attribute__((export_name("maxBytes"))) int maxBytes(void) { return MAX_JSON_BYTES; }
__attribute__((export_name("maxDepth"))) int maxDepth(void) { return MAX_JSON_DEPTH; }
__attribute__((export_name("highBytes"))) uint8_t *highBytes(void) { return &high; }

static inline int ws(int c) { return c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09; }

static inline v128_t load(int p) { return wasm_v128_load(S + p); }

/** The first byte from p that ends a string's run: a control character, `"` or `\` (a zero byte ends at the sentinel). */
static inline int run(int p) {
  for (;;) {
    v128_t v = load(p);
    v128_t m = wasm_v128_or(wasm_v128_or(wasm_i8x16_eq(v, wasm_i8x16_splat(0x22)), wasm_i8x16_eq(v, wasm_i8x16_splat(0x5c))),
                            wasm_u8x16_lt(v, wasm_i8x16_splat(0x20)));
    uint32_t bits = wasm_i8x16_bitmask(m);
    if (bits) return p + __builtin_ctz(bits);
    p += 16;
  }
}

/** The first byte from p outside [lo, lo + span]. */
static inline int outside(int p, uint8_t lo, uint8_t span) {
  for (;;) {
    v128_t v = wasm_i8x16_sub(load(p), wasm_i8x16_splat(lo));
    uint32_t bits = wasm_i8x16_bitmask(wasm_u8x16_gt(v, wasm_i8x16_splat(span)));
    if (bits) return p + __builtin_ctz(bits);
    p += 16;
  }
}

static inline int digits(int p) { return outside(p, 0x30, 9); }
/** `-`, `.`, `/` and digits: the bytes of a number without exponent, and `/` (the number's grammar is checked after) */
static inline int numberRun(int p) { return outside(p, 0x2d, 12); }

static inline int isDigit(int c) { return (unsigned)(c - 0x30) < 10; }

/** Where -?(0|[1-9][0-9]*)(.[0-9]+)? from p ends, or -1. */
static inline int plainNumber(int p) {
  if (S[p] == 0x2d) p++;
  int d = S[p];
  if (!isDigit(d)) return -1;
  p = d == 0x30 ? p + 1 : digits(p + 1);
  if (S[p] != 0x2e) return p;
  int first = p + 1;
  p = digits(first);
  return p == first ? -1 : p;
}

/** A top-level key's bytes [start, end) into the signature: FNV-1a's prime multiply, four bytes (little-endian) per step, then the rest, then the length (which separates one key from the next). */
static inline uint32_t hashKey(int start, int end, uint32_t h) {
  int k = start;
  for (; k + 4 <= end; k += 4) {
    uint32_t w;
    __builtin_memcpy(&w, S + k, 4);
    h = (h ^ w) * 0x01000193u;
  }
  for (; k < end; k++) h = (h ^ S[k]) * 0x01000193u;
  return (h ^ (uint32_t)(end - start)) * 0x01000193u;
}

static int hex(int c) {
  if (isDigit(c)) return c - 0x30;
  c |= 0x20;
  return c >= 0x61 && c <= 0x66 ? c - 0x61 + 10 : -1;
}

static int hex4(int pos) {
  if (pos + 4 > len) return -1;
  int a = hex(S[pos]), b = hex(S[pos + 1]), c = hex(S[pos + 2]), d = hex(S[pos + 3]);
  if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
  return (a << 12) | (b << 8) | (c << 4) | d;
}

/** After a backslash: the position after the escape, or a problem code. */
static int escape(int pos) {
  if (pos >= len) return NOT_JSON;
  int c = S[pos++];
  if (c != 0x75) return c == 0x22 || c == 0x5c || c == 0x2f || c == 0x62 || c == 0x66 || c == 0x6e || c == 0x72 || c == 0x74 ? pos : NOT_JSON;
  int unit = hex4(pos);
  if (unit < 0) return NOT_JSON;
  pos += 4;
  if (unit == 0) return NUL;
  if (unit >= 0xdc00 && unit <= 0xdfff) return LONE_SURROGATE;
  if (unit >= 0xd800 && unit <= 0xdbff) {
    if (pos + 6 > len || S[pos] != 0x5c || S[pos + 1] != 0x75) return LONE_SURROGATE;
    int low = hex4(pos + 2);
    if (low < 0) return NOT_JSON;
    if (low < 0xdc00 || low > 0xdfff) return LONE_SURROGATE;
    pos += 6;
  }
  return pos;
}

/** A string's rest from pos (within it): the position after its closing quote, or a problem code. */
static int string(int pos) {
  for (;;) {
    pos = run(pos);
    int c = S[pos++];
    if (c == 0x22) return pos;
    if (c != 0x5c) return NOT_JSON;
    pos = escape(pos);
    if (pos < 0) return pos;
  }
}

/** the signature across escapedKey() */
static uint32_t keyHash;

/** A top-level key with an escape, from its first byte: hashed byte by byte into keyHash; the position after its closing quote. */
static int escapedKey(int pos) {
  uint32_t h = keyHash;
  for (;;) {
    if (pos >= len) return NOT_JSON;
    int c = S[pos++];
    h = (h ^ (uint32_t)c) * 0x01000193u;
    if (c == 0x22) {
      keyHash = h;
      return pos;
    }
    if (c == 0x5c) {
      int e = escape(pos);
      if (e < 0) return e;
      for (; pos < e; pos++) h = (h ^ S[pos]) * 0x01000193u;
    } else if (c < 0x20) return NOT_JSON;
  }
}

static const uint8_t TRUE_[] = {0x74, 0x72, 0x75, 0x65};
static const uint8_t FALSE_[] = {0x66, 0x61, 0x6c, 0x73, 0x65};
static const uint8_t NULL_[] = {0x6e, 0x75, 0x6c, 0x6c};

/** true, false or null at pos: the position after it, or NOT_JSON. */
static int literal(int pos) {
  int c = S[pos];
  const uint8_t *word = c == 0x74 ? TRUE_ : c == 0x66 ? FALSE_ : c == 0x6e ? NULL_ : 0;
  int n = c == 0x66 ? 5 : 4;
  if (!word || pos + n > len) return NOT_JSON;
  for (int k = 1; k < n; k++)
    if (S[pos + k] != word[k]) return NOT_JSON;
  return pos + n;
}

/** -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? from start: the position after it, or a problem code. */
static int number(int start) {
  int end = len, pos = start;
  if (S[pos] == 0x2d) pos++;
  if (pos >= end) return NOT_JSON;
  if (S[pos] == 0x30) pos++;
  else {
    int first = pos;
    while (pos < end && isDigit(S[pos])) pos++;
    if (pos == first) return NOT_JSON;
  }
  if (pos < end && S[pos] == 0x2e) {
    int first = ++pos;
    while (pos < end && isDigit(S[pos])) pos++;
    if (pos == first) return NOT_JSON;
  }
  if (pos < end && (S[pos] == 0x65 || S[pos] == 0x45)) {
    pos++;
    if (pos < end && (S[pos] == 0x2b || S[pos] == 0x2d)) pos++;
    int first = pos, exponent = 0;
    while (pos < end && isDigit(S[pos])) {
      if (exponent <= MAX_EXPONENT) exponent = exponent * 10 + (S[pos] - 0x30);
      pos++;
    }
    if (pos == first) return NOT_JSON;
    if (exponent > MAX_EXPONENT) return OUT_OF_RANGE;
  }
  return pos - start > MAX_NUMBER_CHARS ? OUT_OF_RANGE : pos;
}

/**
 * The payload's first n bytes (at payload()): the key signature (>= 0, all 32 bits: a double,
 * which JavaScript takes as a number) or a negative problem code; the byte at highBytes() is then
 * 1 when the payload holds a byte >= 0x80 (the caller checks its UTF-8).
 */
static int scanCode(int n, uint32_t *signature);

__attribute__((export_name("scan"))) double scan(int n) {
  uint32_t keys;
  int r = scanCode(n, &keys);
  return r < 0 ? (double)r : (double)keys;
}

static int scanCode(int n, uint32_t *signature) {
  len = n;
  /* the sentinel */
  wasm_v128_store(S + n, wasm_i8x16_splat(0));
  wasm_v128_store(S + n + 16, wasm_i8x16_splat(0));
  /* any byte >= 0x80 (the sentinel's zeros add none): the caller then checks UTF-8 */
  v128_t any = wasm_i8x16_splat(0);
  for (int k = 0; k < n; k += 16) any = wasm_v128_or(any, load(k));
  high = wasm_i8x16_bitmask(any) != 0;
  int end = n, pos = 0;
  uint32_t keys = 0x811c9dc5u;
  int c = S[pos++];
  while (ws(c)) c = S[pos++];
  if (c != 0x7b) return NOT_OBJECT;
  int depth = 1;
  objects[1] = 1;
  int inObject = 1, opened = 1;
  for (;;) {
    /* one member of an object or one element of an array, then what follows it */
    int valueAt = -1; /* >= 0: a value starts there (the fast path handed it over) */
    int afterValue = 0; /* the fast path read a whole member and the byte after it (in c) */
    if (inObject) {
      while (S[pos] == 0x22) {
        int p = run(pos + 1);
        if (S[p] != 0x22 || S[p + 1] != 0x3a) break;
        if (depth == 1) keys = hashKey(pos + 1, p, keys);
        int v = p + 2;
        int q = numberRun(v);
        c = S[q];
        if (plainNumber(v) != q || (c | 0x20) == 0x65 || q - v > MAX_NUMBER_CHARS) {
          valueAt = v;
          break;
        }
        pos = q + 1;
        if (c != 0x2c) {
          if (c <= 0x20)
            while (ws(c)) c = S[pos++];
          afterValue = 1;
          break;
        }
        opened = 0;
      }
    }
    if (!afterValue) {
      if (valueAt >= 0) pos = valueAt;
      else {
        c = S[pos++];
        if (c <= 0x20)
          while (ws(c)) c = S[pos++];
        if (opened && (c == 0x7d || c == 0x5d)) {
          if (c != (inObject ? 0x7d : 0x5d)) return NOT_JSON;
          afterValue = 1;
        } else if (!inObject) {
          pos--;
        } else {
          /* a key */
          if (c != 0x22) return NOT_JSON;
          int p = run(pos);
          c = S[p];
          if (c == 0x22) {
            if (depth == 1) keys = hashKey(pos, p, keys);
            pos = p + 1;
          } else if (c != 0x5c) return NOT_JSON;
          else if (depth == 1) {
            keyHash = keys;
            pos = escapedKey(pos);
            if (pos < 0) return pos;
            keys = keyHash;
          } else {
            pos = string(p);
            if (pos < 0) return pos;
          }
          c = S[pos++];
          if (c != 0x3a) {
            while (ws(c)) c = S[pos++];
            if (c != 0x3a) return NOT_JSON;
          }
        }
      }
    }
    if (!afterValue) {
      /* a value, from pos */
      c = S[pos++];
      if (c <= 0x20)
        while (ws(c)) c = S[pos++];
      if (c == 0x7b || c == 0x5b) {
        if (++depth > MAX_JSON_DEPTH) return TOO_DEEP;
        inObject = c == 0x7b;
        objects[depth] = inObject;
        opened = 1;
        continue;
      }
      if (isDigit(c) || c == 0x2d) {
        int start = pos - 1;
        if (c == 0x2d) {
          c = S[pos++];
          if (!isDigit(c)) return NOT_JSON;
        }
        if (c != 0x30) pos = digits(pos);
        if (S[pos] == 0x2e) {
          int first = ++pos;
          pos = digits(pos);
          if (pos == first) return NOT_JSON;
        }
        if ((S[pos] | 0x20) == 0x65 || pos - start > MAX_NUMBER_CHARS) {
          pos = number(start);
          if (pos < 0) return pos;
        }
      } else if (c == 0x22) {
        int p = run(pos);
        pos = S[p] == 0x22 ? p + 1 : string(p);
        if (pos < 0) return pos;
      } else {
        pos = literal(pos - 1);
        if (pos < 0) return pos;
      }
      c = S[pos++];
      if (c <= 0x20)
        while (ws(c)) c = S[pos++];
    }
    /* after a value: a comma, or closing brackets */
    for (;;) {
      if (c == 0x2c) {
        opened = 0;
        break;
      }
      if (c != (inObject ? 0x7d : 0x5d)) return NOT_JSON;
      if (--depth == 0) {
        c = S[pos++];
        while (ws(c)) c = S[pos++];
        if (pos - 1 != end) return NOT_JSON;
        *signature = keys;
        return 0;
      }
      inObject = objects[depth] == 1;
      c = S[pos++];
      if (c <= 0x20)
        while (ws(c)) c = S[pos++];
    }
  }
}
