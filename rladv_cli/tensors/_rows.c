/* Per-row statistics in C: per-row sums and summaries of token values, and the report's sketch keys counted.
 *
 * row_summary(x, valid, offsets, rows, out): x float32, valid uint8 (0/1), offsets int64 (rows + 1), out float64
 * (rows x SUMMARY_FIELDS), all contiguous and addressed by their data pointers (the caller checks them).
 * For row i, over the tokens t with valid[t] != 0, in token order and in float64:
 *   count, sum = Σ x_t, m2 = Σ (x_t − sum / max(count, 1))², min (+inf when none), max (−inf when none; a NaN
 *   wins both),
 *   positive, negative, zero (counts of x_t > 0, < 0, == 0), mass_positive = Σ_{x_t > 0} x_t,
 *   mass_negative = Σ_{x_t < 0} x_t.
 * These are the sums the torch path (kernels.row_summary) forms, added in the same order, so both give the
 * same bits. A non-finite x_t makes the row's sum non-finite.
 *
 * count_keys(x, valid, label, y, offsets, rows, shift, bucket_bits, max_keys, expected, keys_out, counts_out)
 * -> (distinct, levels, x_min, x_max, y_min, y_max): the sketch keys of distributions.Sketch over the valid
 * tokens, counted. When more than max_keys distinct keys are held, every key drops a mantissa bit (levels
 * counts how many times; shift grows with it), as the sketch would do once it absorbed them. A token's key is
 * (high << bucket_bits) | bucket(x_t), bucket(v) = bits(v + 0.0f) >> shift (the float32's sign, exponent and top
 * mantissa bits; -0.0 counts as 0.0), and high is the row's label (label int64 per row; 0 address: none) or,
 * with y (float32 per token; 0 address: none), bucket(y_t). The distinct keys and their counts go, in no
 * particular order, to keys_out and counts_out (int64, room for every valid token). Counting uses an
 * open-addressing hash table sized for about `expected` distinct keys (a hint: it grows past them), and a
 * run of equal keys touches it once, so the work is linear in the tokens.
 *
 * row_sums(x, offsets, rows, sums, nonzero): x float32, offsets int64 (rows + 1), sums float64 (rows), nonzero
 * float64 (rows; 0 address: not wanted). sums[i] = Σ x_t over row i, added in token order in float64, as
 * torch.segment_reduce adds a float64 row on the CPU; nonzero[i] = the count of x_t != 0.
 *
 * compare_rows(given, given_f64, given_offsets, got, valid, got_offsets, rows, on_valid, atol, rtol, out): one
 * list column of the input (given: float32, or float64 when given_f64; given_offsets int64, rows + 1, from 0)
 * against this run's float32 values (got, got_offsets int64), per row, into out (float64, rows x
 * COMPARE_FIELDS): length_ok, n, bad, bad_masked, nonfinite, nonfinite_at, sum, max, at, input, rladv, factor,
 * scaled, varies, unrounded_float16, unrounded_bfloat16. A row whose lengths differ has length_ok 0, every
 * count 0, the positions -1 and the values NaN. Otherwise, over its positions t where on_valid is 0 or
 * valid[t] is 1, with d = |given_t − got_t| in float64: n counts them, bad those with not
 * (d <= atol + rtol·|got_t|) (a NaN d counts), bad_masked those of them where valid[t] is 0, nonfinite those
 * where d is not finite and nonfinite_at the first one's position (-1: none); sum adds the finite d in token
 * order, max is the largest finite d (0 when none), at the first position holding it (-1: none) and input,
 * rladv the two values there. For a row with bad positions (NaN, 0, 0 for the others): factor = Σ given·got /
 * Σ got² (finite given only; NaN when Σ got² is 0), scaled whether given_t ≈ factor·got_t (the same tolerance,
 * relative to given_t) at every position, varies whether got takes two values. unrounded_* count the bad positions whose given value is not a float16 (bfloat16)
 * number within 2^-10 (2^-7) of |got_t| plus atol of it.
 *
 * The GIL is released while the loops run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SUMMARY_FIELDS 10

/* v when keep is 1, +0.0 when it is 0, without a branch (a sign that varies from token to token would
 * mispredict half the time). Adding +0.0 to a sum that starts at +0.0 leaves it exactly as it was. */
static inline double keep_if(double v, int64_t keep)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits &= (uint64_t)0 - (uint64_t)keep;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static void summarise_rows(const float *x, const uint8_t *valid, const int64_t *offsets, Py_ssize_t rows, double *out)
{
    for (Py_ssize_t i = 0; i < rows; i++) {
        int64_t count = 0, positive = 0, negative = 0, zero = 0, nan = 0;
        double sum = 0.0, m2 = 0.0, mass_pos = 0.0, mass_neg = 0.0;
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t t = offsets[i]; t < offsets[i + 1]; t++) {
            int64_t ok = valid[t] != 0;
            float f = x[t];
            double v = keep_if((double)f, ok);
            int64_t p = v > 0.0, n = v < 0.0;
            count += ok;
            sum += v;
            positive += p;
            negative += n;
            zero += ok & (v == 0.0);
            nan |= ok & (f != f); /* a NaN wins min and max, as in torch */
            mass_pos += keep_if(v, p);
            mass_neg += keep_if(v, n);
            float v_lo = ok ? f : INFINITY, v_hi = ok ? f : -INFINITY;
            lo = v_lo < lo ? v_lo : lo;
            hi = v_hi > hi ? v_hi : hi;
        }
        double mean = sum / (count > 1 ? (double)count : 1.0);
        for (int64_t t = offsets[i]; t < offsets[i + 1]; t++) {
            double d = keep_if((double)x[t] - mean, valid[t] != 0);
            m2 += d * d;
        }
        double *o = out + i * SUMMARY_FIELDS;
        o[0] = (double)count, o[1] = sum, o[2] = m2, o[3] = nan ? NAN : lo, o[4] = nan ? NAN : hi;
        o[5] = (double)positive, o[6] = (double)negative, o[7] = (double)zero, o[8] = mass_pos, o[9] = mass_neg;
    }
}

static void sum_rows(const float *x, const int64_t *offsets, Py_ssize_t rows, double *sums, double *nonzero)
{
    for (Py_ssize_t i = 0; i < rows; i++) {
        double sum = 0.0;
        int64_t count = 0;
        for (int64_t t = offsets[i]; t < offsets[i + 1]; t++) {
            sum += (double)x[t];
            count += x[t] != 0.0f;
        }
        sums[i] = sum;
        if (nonzero != NULL)
            nonzero[i] = (double)count;
    }
}

typedef struct {
    int64_t key, count; /* key == -1: an empty slot */
} slot_t;

typedef struct {
    slot_t *slots; /* key and count side by side: one cache line per probe */
    int64_t used;
    int bits;
} table_t;

static inline uint64_t slot_of(int64_t key, int bits)
{
    return ((uint64_t)key * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

static int table_alloc(table_t *t, int bits)
{
    int64_t cap = (int64_t)1 << bits;
    t->slots = malloc(cap * sizeof(slot_t));
    if (t->slots == NULL)
        return -1;
    for (int64_t j = 0; j < cap; j++)
        t->slots[j].key = -1;
    t->used = 0;
    t->bits = bits;
    return 0;
}

static void table_put(table_t *t, int64_t key, int64_t count)
{
    uint64_t mask = ((uint64_t)1 << t->bits) - 1, j = slot_of(key, t->bits);
    while (t->slots[j].key != -1 && t->slots[j].key != key)
        j = (j + 1) & mask;
    if (t->slots[j].key == -1) {
        t->slots[j].key = key;
        t->slots[j].count = 0;
        t->used++;
    }
    t->slots[j].count += count;
}

static int table_add(table_t *t, int64_t key, int64_t count)
{
    if ((t->used + 1) * 8 > ((int64_t)5 << t->bits)) { /* keep the load under 5/8 */
        table_t bigger;
        if (table_alloc(&bigger, t->bits + 1))
            return -1;
        for (int64_t j = 0; j < ((int64_t)1 << t->bits); j++)
            if (t->slots[j].key != -1)
                table_put(&bigger, t->slots[j].key, t->slots[j].count);
        free(t->slots);
        *t = bigger;
    }
    table_put(t, key, count);
    return 0;
}

/* A key with one mantissa bit fewer (and, paired, one fewer in the paired value's bucket). */
static inline int64_t coarser_key(int64_t key, int paired, int bucket_bits)
{
    int64_t high = key >> bucket_bits, low = (key & (((int64_t)1 << bucket_bits) - 1)) >> 1;
    return ((paired ? high >> 1 : high) << bucket_bits) | low;
}

/* Every key one mantissa bit coarser, as distributions.Sketch._coarsen. */
static int table_coarsen(table_t *t, int paired, int bucket_bits)
{
    table_t coarser;
    if (table_alloc(&coarser, t->bits))
        return -1;
    for (int64_t j = 0; j < ((int64_t)1 << t->bits); j++)
        if (t->slots[j].key != -1)
            table_put(&coarser, coarser_key(t->slots[j].key, paired, bucket_bits), t->slots[j].count);
    free(t->slots);
    *t = coarser;
    return 0;
}

static inline int64_t bucket(float v, int shift)
{
    union { float f; uint32_t u; } bits;
    bits.f = v + 0.0f;
    return (int64_t)(bits.u >> shift);
}

#define BLOCK 256 /* keys gathered before they go into the table */
#define AHEAD 8   /* how many keys ahead of the one going in its slot is fetched */
#if defined(__GNUC__) || defined(__clang__)
#define FETCH_FOR_WRITE(p) __builtin_prefetch((p), 1)
#else
#define FETCH_FOR_WRITE(p) ((void)(p))
#endif

/* Put a block's runs (keys[j] counted runs[j] times) into the table, fetching the slot AHEAD keys on while a
 * key goes in (the keys are random over a table larger than the core's cache). Past max_keys distinct keys,
 * every key drops a mantissa bit: the table's and the block's keys still to go in. Returns -1 when memory runs
 * out; *levels counts the bits dropped. */
static int put_block(table_t *t, int64_t *keys, const int64_t *runs, int m, int paired, int bucket_bits,
                     int64_t max_keys, int *levels)
{
    for (int j = 0; j < m; j++) {
        if (j + AHEAD < m)
            FETCH_FOR_WRITE(&t->slots[slot_of(keys[j + AHEAD], t->bits)]);
        if (table_add(t, keys[j], runs[j]))
            return -1;
        while (t->used > max_keys) {
            if (table_coarsen(t, paired, bucket_bits))
                return -1;
            (*levels)++;
            for (int q = j + 1; q < m; q++)
                keys[q] = coarser_key(keys[q], paired, bucket_bits);
        }
    }
    return 0;
}

/* Returns the number of distinct keys, or -1 when memory runs out; *levels gets the mantissa bits dropped. */
static int64_t count_rows(const float *x, const uint8_t *valid, const int64_t *label, const float *y,
                          const int64_t *offsets, Py_ssize_t rows, int shift, int bucket_bits, int64_t max_keys,
                          int64_t expected, int64_t *keys_out, int64_t *counts_out, double *range, int *levels)
{
    table_t t;
    int bits = 12, m = 0, paired = y != NULL;
    while (bits < 60 && ((int64_t)5 << bits) < 8 * (expected + 1)) /* room for the expected keys: no regrowing */
        bits++;
    if (table_alloc(&t, bits))
        return -1;
    int64_t keys[BLOCK], runs[BLOCK];
    float x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
    *levels = 0;
    for (Py_ssize_t i = 0; i < rows; i++) {
        for (int64_t k = offsets[i]; k < offsets[i + 1]; k++) {
            if (!valid[k])
                continue;
            if (x[k] < x_lo)
                x_lo = x[k];
            if (x[k] > x_hi)
                x_hi = x[k];
            if (paired) {
                if (y[k] < y_lo)
                    y_lo = y[k];
                if (y[k] > y_hi)
                    y_hi = y[k];
            }
            int64_t high = paired ? bucket(y[k], shift + *levels) : label != NULL ? label[i] : 0;
            int64_t key = (high << bucket_bits) | bucket(x[k], shift + *levels);
            if (m > 0 && keys[m - 1] == key) { /* a run of equal keys goes in once */
                runs[m - 1]++;
                continue;
            }
            if (m == BLOCK) {
                if (put_block(&t, keys, runs, m, paired, bucket_bits, max_keys, levels))
                    goto fail;
                m = 0;
                high = paired ? bucket(y[k], shift + *levels) : high; /* the block may have dropped bits */
                key = (high << bucket_bits) | bucket(x[k], shift + *levels);
            }
            keys[m] = key;
            runs[m++] = 1;
        }
    }
    if (put_block(&t, keys, runs, m, paired, bucket_bits, max_keys, levels))
        goto fail;
    int64_t n = 0;
    for (int64_t j = 0; j < ((int64_t)1 << t.bits); j++) {
        if (t.slots[j].key != -1) {
            keys_out[n] = t.slots[j].key;
            counts_out[n] = t.slots[j].count;
            n++;
        }
    }
    free(t.slots);
    range[0] = x_lo, range[1] = x_hi, range[2] = y_lo, range[3] = y_hi;
    return n;
fail:
    free(t.slots);
    return -1;
}

#define COMPARE_FIELDS 16

static inline double given_at(const void *given, int f64, int64_t k)
{
    return f64 ? ((const double *)given)[k] : (double)((const float *)given)[k];
}

/* Whether v is a number of a binary format with `bits` significant bits, smallest normal exponent `min_exp`
 * and largest finite value `max_value` (±inf: yes, NaN: no): what converting it there and back leaves equal. */
static int representable(double v, int bits, int min_exp, double max_value)
{
    double a = fabs(v);
    int e;
    if (isnan(v))
        return 0;
    if (isinf(v) || a == 0.0)
        return 1;
    if (a > max_value)
        return 0;
    frexp(a, &e); /* a = m·2^e, m in [0.5, 1): its leading bit is 2^(e-1) */
    int quantum = (e - 1 >= min_exp ? e - 1 : min_exp) - (bits - 1);
    double units = ldexp(a, -quantum);
    return units == floor(units);
}

static void compare(const void *given, int f64, const int64_t *given_offsets, const float *got, const uint8_t *valid,
                    const int64_t *got_offsets, Py_ssize_t rows, int on_valid, double atol, double rtol, double *out)
{
    for (Py_ssize_t i = 0; i < rows; i++) {
        double *o = out + i * COMPARE_FIELDS;
        int64_t s = got_offsets[i], len = got_offsets[i + 1] - s, g0 = given_offsets[i];
        int64_t n = 0, bad = 0, bad_masked = 0, nonfinite = 0, nonfinite_at = -1, at = -1, off_scale = 0;
        int64_t unrounded16 = 0, unrounded_bf16 = 0;
        double sum = 0.0, largest = -1.0, input = NAN, rladv = NAN, cross = 0.0, square = 0.0, factor = NAN;
        double lo = INFINITY, hi = -INFINITY;
        int length_ok = given_offsets[i + 1] - g0 == len;
        for (int64_t t = 0; length_ok && t < len; t++) {
            int64_t k = s + t;
            if (on_valid && !valid[k])
                continue;
            double want = given_at(given, f64, g0 + t), have = (double)got[k], d = fabs(want - have);
            n++;
            cross += isfinite(want) ? want * have : 0.0, square += have * have;
            lo = have < lo ? have : lo, hi = have > hi ? have : hi;
            if (!(d <= atol + rtol * fabs(have))) {
                bad++;
                bad_masked += !valid[k];
                unrounded16 += !(representable(want, 11, -14, 65504.0) && d <= 0x1p-10 * fabs(have) + atol);
                unrounded_bf16 += !(representable(want, 8, -126, 0x1.fep127) && d <= 0x1p-7 * fabs(have) + atol);
            }
            if (!isfinite(d)) {
                nonfinite++;
                if (nonfinite_at < 0)
                    nonfinite_at = t;
                continue;
            }
            sum += d;
            if (d > largest)
                largest = d, at = t, input = want, rladv = have;
        }
        int differs = bad > 0; /* a factor, and whether want ≈ factor·have everywhere, only for a row that differs */
        if (differs && square > 0.0)
            factor = cross / square;
        for (int64_t t = 0; differs && t < len; t++) {
            int64_t k = s + t;
            if (on_valid && !valid[k])
                continue;
            double want = given_at(given, f64, g0 + t);
            off_scale += !(fabs(want - factor * (double)got[k]) <= atol + rtol * fabs(want));
        }
        o[0] = length_ok, o[1] = (double)n, o[2] = (double)bad, o[3] = (double)bad_masked;
        o[4] = (double)nonfinite, o[5] = (double)nonfinite_at, o[6] = sum, o[7] = largest < 0.0 ? 0.0 : largest;
        o[8] = (double)at, o[9] = input, o[10] = rladv, o[11] = factor, o[12] = differs && off_scale == 0 && square > 0.0;
        o[13] = differs && hi > lo, o[14] = (double)unrounded16, o[15] = (double)unrounded_bf16;
    }
}

static PyObject *compare_rows(PyObject *self, PyObject *args)
{
    unsigned long long given, given_offsets, got, valid, got_offsets, out;
    int given_f64, on_valid;
    Py_ssize_t rows;
    double atol, rtol;
    (void)self;
    if (!PyArg_ParseTuple(args, "KiKKKKniddK", &given, &given_f64, &given_offsets, &got, &valid, &got_offsets, &rows,
                          &on_valid, &atol, &rtol, &out))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    compare((const void *)(uintptr_t)given, given_f64, (const int64_t *)(uintptr_t)given_offsets,
            (const float *)(uintptr_t)got, (const uint8_t *)(uintptr_t)valid, (const int64_t *)(uintptr_t)got_offsets,
            rows, on_valid, atol, rtol, (double *)(uintptr_t)out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *count_keys(PyObject *self, PyObject *args)
{
    unsigned long long x, valid, label, y, offsets, keys_out, counts_out;
    Py_ssize_t rows;
    int shift, bucket_bits, levels;
    long long max_keys, expected;
    int64_t n;
    double range[4];
    (void)self;
    if (!PyArg_ParseTuple(args, "KKKKKniiLLKK", &x, &valid, &label, &y, &offsets, &rows, &shift, &bucket_bits,
                          &max_keys, &expected, &keys_out, &counts_out))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    n = count_rows((const float *)(uintptr_t)x, (const uint8_t *)(uintptr_t)valid, (const int64_t *)(uintptr_t)label,
                   (const float *)(uintptr_t)y, (const int64_t *)(uintptr_t)offsets, rows, shift, bucket_bits,
                   (int64_t)max_keys, (int64_t)expected, (int64_t *)(uintptr_t)keys_out,
                   (int64_t *)(uintptr_t)counts_out, range, &levels);
    Py_END_ALLOW_THREADS
    if (n < 0)
        return PyErr_NoMemory();
    return Py_BuildValue("(Lidddd)", (long long)n, levels, range[0], range[1], range[2], range[3]);
}

static PyObject *row_summary(PyObject *self, PyObject *args)
{
    unsigned long long x, valid, offsets, out;
    Py_ssize_t rows;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKKnK", &x, &valid, &offsets, &rows, &out))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    summarise_rows((const float *)(uintptr_t)x, (const uint8_t *)(uintptr_t)valid, (const int64_t *)(uintptr_t)offsets,
                   rows, (double *)(uintptr_t)out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *row_sums(PyObject *self, PyObject *args)
{
    unsigned long long x, offsets, sums, nonzero;
    Py_ssize_t rows;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKnKK", &x, &offsets, &rows, &sums, &nonzero))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    sum_rows((const float *)(uintptr_t)x, (const int64_t *)(uintptr_t)offsets, rows, (double *)(uintptr_t)sums,
             (double *)(uintptr_t)nonzero);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"row_sums", row_sums, METH_VARARGS,
     "row_sums(x, offsets, rows, sums, nonzero): per-row float64 sums of x in token order, and counts of x != 0."},
    {"row_summary", row_summary, METH_VARARGS,
     "row_summary(x, valid, offsets, rows, out): per-row count, sum, m2, min, max, positive, negative, zero, "
     "mass_positive, mass_negative of x over valid tokens, float64."},
    {"count_keys", count_keys, METH_VARARGS,
     "count_keys(x, valid, label, y, offsets, rows, shift, bucket_bits, max_keys, expected, keys_out, counts_out): "
     "distinct sketch keys of the valid tokens and their counts; returns (distinct, levels, x_min, x_max, y_min, y_max)."},
    {"compare_rows", compare_rows, METH_VARARGS,
     "compare_rows(given, given_f64, given_offsets, got, valid, got_offsets, rows, on_valid, atol, rtol, out): per-row "
     "comparison of an input list column with this run's float32 values, float64 (rows x 16)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
