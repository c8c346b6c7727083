/* Sequential reverse linear scan over flat ragged rows, for CPU tensors.
 *
 *   h_t = b_t + a_t * h_{t+1}   right to left inside every row; a row's last token takes h_t = b_t,
 *                               and so does any token with a_t == 0 (nothing from the right enters).
 *
 * This is the recurrence of verl's per-timestep loops (GAE, REINFORCE++, ReMax returns) evaluated in the
 * same order and with the same float32 operations (one multiply, then one add; built with
 * -ffp-contract=off so no fused multiply-add changes the rounding). Rows are independent, so a row's
 * result never depends on its chunk. The GIL is released while the loop runs.
 *
 * reverse_linear_scan(a, b, offsets, rows, out): addresses of contiguous float32 a, b, out of
 * offsets[rows] values and of int64 offsets of rows + 1 values.
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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
