/* An edge's plan in bulk (see plans.py): which producer blocks each consumer region
 * meets, and the hops of each transfer along its route with their times, for a cost
 * model whose transfer time over a link is latency + bytes / bandwidth. The results
 * equal the Python planner's (the same pairs in the same order, the same IEEE
 * operations); a test compares them. */

#include "store.h"

#include <stdlib.h>
#include <string.h>

/* a growing array of one item size */
typedef struct {
    char *v;
    Py_ssize_t n, cap, size;
} Out;

static int
out_push(Out *o, const void *x)
{
    if (o->n == o->cap) {
        Py_ssize_t cap = o->cap ? 2 * o->cap : 256;
        char *nv = realloc(o->v, cap * o->size);
        if (!nv) return PyErr_NoMemory(), -1;
        o->v = nv;
        o->cap = cap;
    }
    memcpy(o->v + o->n++ * o->size, x, o->size);
    return 0;
}

/* a tuple of three arrays holding what a, b and c grew to, of the type codes given */
static PyObject *
three_arrays(const char codes[3], const Out *a, const Out *b, const Out *c)
{
    const Out *outs[3] = {a, b, c};
    PyObject *arrays[3] = {NULL, NULL, NULL}, *result = NULL;
    int made = 0;
    for (; made < 3; made++) {
        char code[2] = {codes[made], 0};
        arrays[made] = new_array(code, outs[made]->v, outs[made]->n, outs[made]->size);
        if (!arrays[made]) break;
    }
    if (made == 3)
        result = PyTuple_Pack(3, arrays[0], arrays[1], arrays[2]);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(arrays[i]);
    return result;
}

/* overlaps(producer, consumer, rank, width) -> (k, m, nbytes): for each consumer region
 * k (consumer: an array('q') of K regions, rank (start, stop) pairs each), in order,
 * every producer block m (producer: M blocks alike) it meets in every dim, by m, and
 * the bytes of the overlap (its elements times width) */
PyObject *
plan_overlaps(PyObject *module, PyObject *args)
{
    PyObject *p_o, *c_o;
    Py_ssize_t rank;
    long long width;
    if (!PyArg_ParseTuple(args, "OOnL", &p_o, &c_o, &rank, &width))
        return NULL;
    Arr a[2];
    memset(a, 0, sizeof(a));
    Out ks = {NULL, 0, 0, 4}, ms = {NULL, 0, 0, 4}, sizes = {NULL, 0, 0, 8};
    PyObject *result = NULL;
    if (arr_get(p_o, &a[0], "producer blocks", "q", 8) < 0
            || arr_get(c_o, &a[1], "consumer regions", "q", 8) < 0)
        goto done;
    Py_ssize_t per = 2 * rank;
    if (rank < 0 || (per && (a[0].n % per || a[1].n % per))) {
        PyErr_SetString(PyExc_ValueError, "overlaps: regions must be rank (start, stop) pairs");
        goto done;
    }
    const int64_t *pb = a[0].v, *cr = a[1].v;
    Py_ssize_t M = per ? a[0].n / per : 1, K = per ? a[1].n / per : 1;
    if (!per) {   /* scalars: given as one empty region each; K and M come from elsewhere */
        PyErr_SetString(PyExc_ValueError, "overlaps: rank 0 is planned in Python");
        goto done;
    }
    for (Py_ssize_t k = 0; k < K; k++) {
        const int64_t *c = cr + k * per;
        for (Py_ssize_t m = 0; m < M; m++) {
            const int64_t *p = pb + m * per;
            int64_t volume = 1;
            Py_ssize_t d = 0;
            for (; d < rank; d++) {
                int64_t lo = c[2 * d] > p[2 * d] ? c[2 * d] : p[2 * d];
                int64_t hi = c[2 * d + 1] < p[2 * d + 1] ? c[2 * d + 1] : p[2 * d + 1];
                if (lo >= hi) break;
                volume *= hi - lo;
            }
            if (d < rank)
                continue;
            int32_t k32 = (int32_t)k, m32 = (int32_t)m;
            int64_t nbytes = volume * width;
            if (out_push(&ks, &k32) < 0 || out_push(&ms, &m32) < 0
                    || out_push(&sizes, &nbytes) < 0)
                goto done;
        }
    }
    result = three_arrays("iiq", &ks, &ms, &sizes);
done:
    free(ks.v);
    free(ms.v);
    free(sizes.v);
    arrs_release(a, 2);
    return result;
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* unrouted(k, m, pdev, cdev, route_at, devices, reverse) -> the codes src * devices +
 * dst, ascending, of the pairs the transfers need (from pdev[m] to cdev[k], or back
 * with reverse) whose route_at is -1 and whose ends differ */
PyObject *
plan_unrouted(PyObject *module, PyObject *args)
{
    PyObject *o[5];
    Py_ssize_t devices;
    int reverse;
    if (!PyArg_ParseTuple(args, "OOOOOnp", &o[0], &o[1], &o[2], &o[3], &o[4], &devices, &reverse))
        return NULL;
    static const char *what[5] = {"k", "m", "pdev", "cdev", "route_at"};
    Arr a[5];
    memset(a, 0, sizeof(a));
    Out codes = {NULL, 0, 0, 8};
    PyObject *result = NULL;
    for (int i = 0; i < 5; i++)
        if (arr_get(o[i], &a[i], what[i], "i", 4) < 0) goto done;
    const int32_t *ks = a[0].v, *ms = a[1].v, *pdev = a[2].v, *cdev = a[3].v;
    const int32_t *route_at = a[4].v;
    for (Py_ssize_t i = 0; i < a[0].n && i < a[1].n; i++) {
        if (ms[i] < 0 || ms[i] >= a[2].n || ks[i] < 0 || ks[i] >= a[3].n) {
            PyErr_SetString(PyExc_IndexError, "unrouted: a task out of range");
            goto done;
        }
        int64_t src = pdev[ms[i]], dst = cdev[ks[i]];
        if (reverse) { int64_t t = src; src = dst; dst = t; }
        if (src == dst)
            continue;
        if (src < 0 || dst < 0 || src >= devices || dst >= devices
                || src * devices + dst >= a[4].n) {
            PyErr_SetString(PyExc_IndexError, "unrouted: a device out of range");
            goto done;
        }
        int64_t code = src * devices + dst;
        if (route_at[code] < 0 && out_push(&codes, &code) < 0)
            goto done;
    }
    qsort(codes.v, codes.n, 8, cmp_i64);
    Py_ssize_t kept = 0;
    int64_t *c = (int64_t *)codes.v;
    for (Py_ssize_t i = 0; i < codes.n; i++)
        if (!kept || c[i] != c[kept - 1]) c[kept++] = c[i];
    result = new_array("q", codes.v, kept, 8);
done:
    free(codes.v);
    arrs_release(a, 5);
    return result;
}

/* hops(k, m, nbytes, pdev, cdev, route_at, route_links, devices, reverse, hop_rset,
 * latency, bandwidth) -> (offsets, rsets, durations): per pair i, the hops of its route
 * (route_links[route_at[src * devices + dst]] links, then their ids), each link's
 * resource set and latency + nbytes / bandwidth; offsets[i]..offsets[i+1] are pair i's */
PyObject *
plan_hops(PyObject *module, PyObject *args)
{
    PyObject *o[11];
    Py_ssize_t devices;
    int reverse;
    if (!PyArg_ParseTuple(args, "OOOOOOOnpOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &devices, &reverse, &o[7], &o[8], &o[9]))
        return NULL;
    static const char *what[10] = {"k", "m", "nbytes", "pdev", "cdev", "route_at",
                                   "route_links", "hop_rset", "latency", "bandwidth"};
    static const char *code[10] = {"i", "i", "q", "i", "i", "i", "i", "i", "d", "d"};
    Arr a[10];
    memset(a, 0, sizeof(a));
    Out offsets = {NULL, 0, 0, 4}, rsets = {NULL, 0, 0, 4}, durations = {NULL, 0, 0, 8};
    PyObject *result = NULL;
    for (int i = 0; i < 10; i++)
        if (arr_get(o[i], &a[i], what[i], code[i], code[i][0] == 'i' ? 4 : 8) < 0) goto done;
    const int32_t *ks = a[0].v, *ms = a[1].v, *pdev = a[3].v, *cdev = a[4].v;
    const int64_t *sizes = a[2].v;
    const int32_t *route_at = a[5].v, *links = a[6].v, *hop_rset = a[7].v;
    const double *latency = a[8].v, *bandwidth = a[9].v;
    int32_t zero = 0;
    if (out_push(&offsets, &zero) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < a[0].n; i++) {
        if (i >= a[1].n || i >= a[2].n || ms[i] < 0 || ms[i] >= a[3].n || ks[i] < 0
                || ks[i] >= a[4].n) {
            PyErr_SetString(PyExc_IndexError, "hops: a pair out of range");
            goto done;
        }
        int64_t src = pdev[ms[i]], dst = cdev[ks[i]];
        if (reverse) { int64_t t = src; src = dst; dst = t; }
        if (src != dst) {
            int64_t at = src >= 0 && dst >= 0 && src < devices && dst < devices
                         && src * devices + dst < a[5].n ? route_at[src * devices + dst] : -1;
            if (at < 0 || at >= a[6].n || at + 1 + links[at] > a[6].n) {
                PyErr_SetString(PyExc_KeyError, "hops: a pair has no route yet");
                goto done;
            }
            for (int32_t h = 0; h < links[at]; h++) {
                int32_t link = links[at + 1 + h];
                if (link < 0 || link >= a[7].n || link >= a[8].n || link >= a[9].n) {
                    PyErr_SetString(PyExc_IndexError, "hops: a link out of range");
                    goto done;
                }
                double seconds = latency[link] + (double)sizes[i] / bandwidth[link];
                if (out_push(&rsets, &hop_rset[link]) < 0 || out_push(&durations, &seconds) < 0)
                    goto done;
            }
        }
        int32_t end = (int32_t)rsets.n;
        if (out_push(&offsets, &end) < 0)
            goto done;
    }
    result = three_arrays("iid", &offsets, &rsets, &durations);
done:
    free(offsets.v);
    free(rsets.v);
    free(durations.v);
    arrs_release(a, 10);
    return result;
}
