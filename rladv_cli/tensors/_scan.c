/* Sequential reverse scans over flat ragged rows, for CPU tensors.
 *
 * They evaluate the recurrences of verl's per-timestep loops (GAE, REINFORCE++, ReMax returns) in the same
 * order and with the same float32 operations (a multiply, then an add; built with -ffp-contract=off so no
 * fused multiply-add changes the rounding). Rows are independent, so a row's result never depends on its
 * chunk. The GIL is released while a loop runs. Arguments are addresses of contiguous float32 arrays of
 * offsets[rows] values and of int64 offsets of rows + 1 values (the caller checks them).
 *
 * reverse_linear_scan(a, b, offsets, rows, out):
 *   h_t = b_t + a_t * h_{t+1} right to left inside every row; a row's last token takes h_t = b_t, and so
 *   does any token with a_t == 0 (nothing from the right enters).
 *
 * gae(mask, rewards, values, offsets, rows, gamma, gamma_lam, advantages, returns): verl's
 * compute_gae_advantage_return per row, right to left, with nv = V at the next kept token (0 at first):
 *   kept (mask != 0):  delta = (r_t + gamma * nv) - V_t;  A = delta + gamma_lam * A;  nv = V_t
 *   not kept:          A and nv carried unchanged
 *   advantages_t = A, returns_t = A + V_t.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static void scan_rows(const float *a, const float *b, const int64_t *offsets, Py_ssize_t rows, float *out)
{
    for (Py_ssize_t i = 0; i < rows; i++) {
        int64_t start = offsets[i], t = offsets[i + 1];
        if (t <= start)
            continue;
        t -= 1;
        float h = b[t];
        out[t] = h;
        while (t > start) {
            t -= 1;
            if (a[t] == 0.0f) {
                h = b[t];
            } else {
                float carried = a[t] * h;
                h = b[t] + carried;
            }
            out[t] = h;
        }
    }
}

static void gae_rows(const float *mask, const float *r, const float *v, const int64_t *offsets, Py_ssize_t rows,
                     float gamma, float gamma_lam, float *adv, float *ret)
{
    for (Py_ssize_t i = 0; i < rows; i++) {
        float a = 0.0f, nv = 0.0f;
        for (int64_t t = offsets[i + 1] - 1; t >= offsets[i]; t--) {
            if (mask[t] != 0.0f) {
                float next = gamma * nv;
                float delta = (r[t] + next) - v[t];
                float carried = gamma_lam * a;
                a = delta + carried;
                nv = v[t];
            }
            adv[t] = a;
            ret[t] = a + v[t];
        }
    }
}

static PyObject *gae(PyObject *self, PyObject *args)
{
    unsigned long long mask, r, v, offsets, adv, ret;
    Py_ssize_t rows;
    float gamma, gamma_lam;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKKKnffKK", &mask, &r, &v, &offsets, &rows, &gamma, &gamma_lam, &adv, &ret))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    gae_rows((const float *)(uintptr_t)mask, (const float *)(uintptr_t)r, (const float *)(uintptr_t)v,
             (const int64_t *)(uintptr_t)offsets, rows, gamma, gamma_lam, (float *)(uintptr_t)adv,
             (float *)(uintptr_t)ret);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *reverse_linear_scan(PyObject *self, PyObject *args)
{
    unsigned long long a, b, offsets, out;
    Py_ssize_t rows;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKKnK", &a, &b, &offsets, &rows, &out))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    scan_rows((const float *)(uintptr_t)a, (const float *)(uintptr_t)b, (const int64_t *)(uintptr_t)offsets,
              rows, (float *)(uintptr_t)out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"reverse_linear_scan", reverse_linear_scan, METH_VARARGS,
     "reverse_linear_scan(a, b, offsets, rows, out): sequential float32 scan h_t = b_t + a_t * h_{t+1} per row."},
    {"gae", gae, METH_VARARGS,
     "gae(mask, rewards, values, offsets, rows, gamma, gamma_lam, advantages, returns): verl's GAE loop per row."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
