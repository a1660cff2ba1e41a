/* Tasks made in bulk (see taskgraph.py for the rules they follow): an op's forward and
 * backward tasks; an edge's dependencies and transfer chains, forward and back; a
 * parameter's all-reduces and updates. Python computes what they are made of once per
 * op and config (block devices, costs, overlaps, routes) and hands it over as arrays;
 * here the tasks are made, keyed and linked. Each call checks its arrays before it
 * makes anything, so an error leaves the store as it was (short of memory). */

#include "store.h"

#include <stdlib.h>
#include <string.h>

#define I32(a) ((const int32_t *)(a).v)
#define F64(a) ((const double *)(a).v)
#define I64(a) ((const int64_t *)(a).v)

/* the growing list of ids a call made, handed back as an array('i') */
typedef struct {
    int32_t *v;
    Py_ssize_t n, cap;
} Made;

static int
made_push(Made *m, int32_t t)
{
    if (m->n == m->cap) {
        Py_ssize_t cap = m->cap ? 2 * m->cap : 64;
        int32_t *nv = realloc(m->v, cap * sizeof(int32_t));
        if (!nv) return PyErr_NoMemory(), -1;
        m->v = nv;
        m->cap = cap;
    }
    m->v[m->n++] = t;
    return 0;
}

static PyObject *
made_array(Made *m)
{
    PyObject *result = new_array("i", m->v, m->n, sizeof(int32_t));
    free(m->v);
    memset(m, 0, sizeof(*m));
    return result;
}

static int
make(Store *s, const Spec *spec, const Key *key, Made *made, int32_t *id)
{
    if (new_task(s, spec, key, id) < 0)
        return -1;
    return made ? made_push(made, *id) : 0;
}

static int
device_arg(Store *s, int32_t d)
{
    if (d < 0 || d >= s->num_resources) {
        PyErr_Format(PyExc_IndexError, "device %d out of range", (int)d);
        return -1;
    }
    return 0;
}

static int
rset_check(Store *s, int32_t r)
{
    if (r < 0 || r >= s->nrsets) {
        PyErr_Format(PyExc_IndexError, "resource set %d out of range", (int)r);
        return -1;
    }
    return 0;
}

/* add_op(op, devices, forward, backward, kept, workspace[, shift, keeping]) -> (forward
 * ids, backward ids): per task k of the op's config, a forward task on devices[k] taking
 * forward[k] seconds and keeping kept bytes (none, and no input either, unless keeping),
 * and (backward not None) a backward task after it; shift is added to the op's place in
 * the keys (a micro-batch's) */
PyObject *
Store_add_op(Store *s, PyObject *args)
{
    int op, shift = 0, keeping = 1;
    PyObject *dev_o, *fwd_o, *bwd_o;
    long long kept, workspace;
    if (!PyArg_ParseTuple(args, "iOOOLL|ip", &op, &dev_o, &fwd_o, &bwd_o, &kept, &workspace,
                          &shift, &keeping))
        return NULL;
    Arr a[3] = {{{0}}};
    Made fwd = {0}, bwd = {0};
    PyObject *result = NULL;
    int training = bwd_o != Py_None;
    if (arr_get(dev_o, &a[0], "devices", "i", 4) < 0 || arr_get(fwd_o, &a[1], "forward", "d", 8) < 0
            || (training && arr_get(bwd_o, &a[2], "backward", "d", 8) < 0))
        goto done;
    Py_ssize_t count = a[0].n;
    if (a[1].n != count || (training && a[2].n != count)) {
        PyErr_SetString(PyExc_ValueError, "add_op: devices, forward and backward differ in "
                        "length");
        goto done;
    }
    for (Py_ssize_t k = 0; k < count; k++)   /* checked first: nothing is made unless all is well */
        if (device_arg(s, I32(a[0])[k]) < 0)
            goto done;
    for (Py_ssize_t k = 0; k < count; k++) {
        int32_t d = I32(a[0])[k], f, b;
        Spec task = {.duration = F64(a[1])[k], .nbytes = kept, .workspace = workspace,
                     .rset = d, .op = op, .part = (int32_t)k, .keeps = keeping ? d : -1,
                     .kind = K_FORWARD};
        Key key = {{0, op + shift, 1, k}, 4};
        if (make(s, &task, &key, &fwd, &f) < 0)
            goto done;
        if (!training)
            continue;
        Spec back = {.duration = F64(a[2])[k], .rset = d, .op = op, .part = (int32_t)k,
                     .keeps = -1, .kind = K_BACKWARD};
        Key bkey = {{1, shift - op, 1, k}, 4};
        if (make(s, &back, &bkey, &bwd, &b) < 0 || link_tasks(s, f, b) < 0)
            goto done;
    }
    PyObject *f = made_array(&fwd), *b = f ? made_array(&bwd) : NULL;
    if (b)
        result = PyTuple_Pack(2, f, b);
    Py_XDECREF(f);
    Py_XDECREF(b);
done:
    free(fwd.v);
    free(bwd.v);
    arrs_release(a, 3);
    return result;
}

/* b needs bytes a made: a dependency (no hops), or a chain of transfers, one per hop
 * (hops [h0, h1) of rsets and durations), each keyed key + (hop,) */
static int
connect(Store *s, int32_t a, int32_t b, Py_ssize_t h0, Py_ssize_t h1, const int32_t *rsets,
        const double *durations, Spec *init, Key *key, int keeps_last, Made *made)
{
    int32_t prev = a, t;
    if (h0 == h1)
        return link_tasks(s, a, b);
    int at = key->len++;
    for (Py_ssize_t h = h0; h < h1; h++) {
        init->rset = rsets[h];
        init->duration = durations[h];
        init->keeps = h == h1 - 1 ? keeps_last : -1;
        key->v[at] = h - h0;
        if (make(s, init, key, made, &t) < 0 || link_tasks(s, prev, t) < 0)
            return -1;
        prev = t;
    }
    key->len--;
    return link_tasks(s, prev, b);
}

static int
task_in(Store *s, const Arr *tasks, int32_t i, const char *what)
{
    if (i < 0 || i >= tasks->n) {
        PyErr_Format(PyExc_IndexError, "add_edge: %s task %d out of range", what, (int)i);
        return -1;
    }
    return check_id(s, I32(*tasks)[i]);
}

/* add_edge(producer, consumer, pfwd, cfwd, pbwd, cbwd, slot, k, m, nbytes, fhops,
 * frsets, fdurations, bhops, brsets, bdurations[, shift]) -> transfer ids (shift as
 * add_op's). For each overlap i
 * (input slot[i] of consumer task k[i] reads nbytes[i] of producer task m[i]): the
 * forward chain pfwd[m] -> cfwd[k] over hops fhops[i]..fhops[i+1] (rsets, durations),
 * then, when pbwd is not empty, the gradient's chain cbwd[k] -> pbwd[m] over bhops. */
PyObject *
Store_add_edge(Store *s, PyObject *args)
{
    int producer, consumer, shift = 0;
    PyObject *o[16];
    if (!PyArg_ParseTuple(args, "iiOOOOOOOOOOOOOO|i", &producer, &consumer, &o[0], &o[1], &o[2],
                          &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11],
                          &o[12], &o[13], &shift))
        return NULL;
    static const char *what[14] = {"pfwd", "cfwd", "pbwd", "cbwd", "slot", "k", "m", "nbytes",
                                   "fhops", "frsets", "fdurations", "bhops", "brsets",
                                   "bdurations"};
    static const char *code[14] = {"i", "i", "i", "i", "i", "i", "i", "q", "i", "i", "d", "i",
                                   "i", "d"};
    Arr a[14];
    memset(a, 0, sizeof(a));
    Made made = {0};
    PyObject *result = NULL;
    for (int i = 0; i < 14; i++) {
        Py_ssize_t size = code[i][0] == 'i' ? 4 : 8;
        if (arr_get(o[i], &a[i], what[i], code[i], size) < 0)
            goto done;
    }
    Py_ssize_t pairs = a[4].n;
    int backward = a[2].n > 0;
    if (a[5].n != pairs || a[6].n != pairs || a[7].n != pairs || a[8].n != pairs + 1
            || (backward && a[11].n != pairs + 1)) {
        PyErr_SetString(PyExc_ValueError, "add_edge: the plan's arrays differ in length");
        goto done;
    }
    /* checked first: nothing is made unless all is well */
    for (int r = 9; r <= 12; r += 3)
        for (Py_ssize_t h = 0; h < a[r].n; h++)
            if (rset_check(s, I32(a[r])[h]) < 0) goto done;
    for (Py_ssize_t i = 0; i < pairs; i++) {
        int32_t k = I32(a[5])[i], m = I32(a[6])[i];
        if (task_in(s, &a[0], m, "producer") < 0 || task_in(s, &a[1], k, "consumer") < 0
                || (backward && (task_in(s, &a[2], m, "producer") < 0
                                 || task_in(s, &a[3], k, "consumer") < 0)))
            goto done;
        for (int side = 0; side < 1 + backward; side++) {
            const Arr *hops = &a[8 + 3 * side];
            Py_ssize_t h0 = I32(*hops)[i], h1 = I32(*hops)[i + 1];
            if (h0 < 0 || h1 < h0 || h1 > a[9 + 3 * side].n || h1 > a[10 + 3 * side].n) {
                PyErr_SetString(PyExc_ValueError, "add_edge: hops out of range");
                goto done;
            }
        }
    }
    for (Py_ssize_t i = 0; i < pairs; i++) {
        int32_t slot = I32(a[4])[i], k = I32(a[5])[i], m = I32(a[6])[i];
        int64_t nbytes = I64(a[7])[i];
        int32_t pf = I32(a[0])[m], cf = I32(a[1])[k];
        Py_ssize_t h0 = I32(a[8])[i], h1 = I32(a[8])[i + 1];
        Spec init = {.nbytes = nbytes, .op = consumer, .part = k, .kind = K_TRANSFER};
        Key key = {{0, consumer + shift, 0, k, slot, m}, 6};
        int keeps = s->tasks[cf].kind == K_FORWARD ? s->info[cf].keeps : -1;
        if (connect(s, pf, cf, h0, h1, I32(a[9]), F64(a[10]), &init, &key, keeps, &made) < 0)
            goto done;
        if (!backward)
            continue;
        h0 = I32(a[11])[i];
        h1 = I32(a[11])[i + 1];
        Spec back = {.nbytes = nbytes, .op = producer, .part = m, .kind = K_TRANSFER};
        Key bkey = {{1, shift - producer, 0, m, consumer, slot, k}, 7};
        if (connect(s, I32(a[3])[k], I32(a[2])[m], h0, h1, I32(a[12]), F64(a[13]), &back,
                    &bkey, -1, &made) < 0)
            goto done;
    }
    result = made_array(&made);
done:
    free(made.v);
    arrs_release(a, 14);
    return result;
}

static int
cmp_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* add_param(order, producers, gdevs, gdevices, gblocks, gblockids, grsets, gdurations,
 * gnbytes, udevices, udurations, unbytes) -> sync and update ids. Group g holds the
 * devices gdevices[gdevs[g]..gdevs[g+1]] and its gradients come from the tasks
 * producers[b] for b in gblockids[gblocks[g]..gblocks[g+1]]; held by more than one
 * device, an all-reduce (gnbytes[g] bytes, grsets[g], gdurations[g]) follows them.
 * Then per device udevices[j], an update (unbytes[j] bytes, udurations[j]) after what
 * makes its gradients ready: the single-device groups' tasks and the all-reduces of the
 * groups it is in, each once, in group order. */
PyObject *
Store_add_param(Store *s, PyObject *args)
{
    int order;
    PyObject *o[11];
    if (!PyArg_ParseTuple(args, "iOOOOOOOOOOO", &order, &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10]))
        return NULL;
    static const char *what[11] = {"producers", "gdevs", "gdevices", "gblocks", "gblockids",
                                   "grsets", "gdurations", "gnbytes", "udevices",
                                   "udurations", "unbytes"};
    static const char *code[11] = {"i", "i", "i", "i", "i", "i", "d", "q", "i", "d", "q"};
    Arr a[11];
    memset(a, 0, sizeof(a));
    Made made = {0};
    PyObject *result = NULL;
    int32_t *tasks = NULL, *tstart = NULL, *count = NULL, *fill = NULL, *ready = NULL;
    int32_t *syncs = NULL;
    for (int i = 0; i < 11; i++) {
        Py_ssize_t size = code[i][0] == 'i' ? 4 : 8;
        if (arr_get(o[i], &a[i], what[i], code[i], size) < 0)
            goto done;
    }
    Py_ssize_t groups = a[1].n - 1, ndev = s->num_resources;
    if (groups < 0 || a[3].n != groups + 1 || a[5].n != groups || a[6].n != groups
            || a[7].n != groups || a[9].n != a[8].n || a[10].n != a[8].n
            || I32(a[1])[groups] > a[2].n || I32(a[3])[groups] > a[4].n) {
        PyErr_SetString(PyExc_ValueError, "add_param: the plan's arrays differ in length");
        goto done;
    }
    /* each group's producing tasks, sorted, each once */
    tasks = malloc((a[4].n ? a[4].n : 1) * sizeof(int32_t));
    tstart = malloc((groups + 1) * sizeof(int32_t));
    syncs = malloc((groups ? groups : 1) * sizeof(int32_t));
    count = calloc(ndev + 1, sizeof(int32_t));
    fill = calloc(ndev + 1, sizeof(int32_t));
    if (!tasks || !tstart || !syncs || !count || !fill) { PyErr_NoMemory(); goto done; }
    /* checked first: nothing is made unless all is well */
    for (Py_ssize_t j = 0; j < a[4].n; j++) {
        int32_t b = I32(a[4])[j];
        if (b < 0 || b >= a[0].n || check_id(s, I32(a[0])[b]) < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_IndexError, "add_param: block %d out of range", (int)b);
            goto done;
        }
    }
    for (Py_ssize_t j = 0; j < a[2].n; j++)
        if (device_arg(s, I32(a[2])[j]) < 0) goto done;
    for (Py_ssize_t j = 0; j < a[8].n; j++)
        if (device_arg(s, I32(a[8])[j]) < 0) goto done;
    for (Py_ssize_t g = 0; g < groups; g++) {
        if (I32(a[1])[g + 1] - I32(a[1])[g] != 1 && rset_check(s, I32(a[5])[g]) < 0)
            goto done;
        if (I32(a[1])[g + 1] < I32(a[1])[g] || I32(a[3])[g + 1] < I32(a[3])[g]) {
            PyErr_SetString(PyExc_ValueError, "add_param: the plan's offsets go backwards");
            goto done;
        }
    }
    Py_ssize_t ntasks = 0;
    for (Py_ssize_t g = 0; g < groups; g++) {
        tstart[g] = (int32_t)ntasks;
        Py_ssize_t first = ntasks;
        for (int32_t j = I32(a[3])[g]; j < I32(a[3])[g + 1]; j++)
            tasks[ntasks++] = I32(a[0])[I32(a[4])[j]];
        qsort(tasks + first, ntasks - first, sizeof(int32_t), cmp_id);
        Py_ssize_t kept = first;
        for (Py_ssize_t j = first; j < ntasks; j++)
            if (j == first || tasks[j] != tasks[kept - 1]) tasks[kept++] = tasks[j];
        ntasks = kept;
        int32_t d0 = I32(a[1])[g], d1 = I32(a[1])[g + 1];
        syncs[g] = -1;
        if (d1 - d0 == 1) {
            count[I32(a[2])[d0]] += (int32_t)(ntasks - first);
            continue;
        }
        Spec init = {.duration = F64(a[6])[g], .nbytes = I64(a[7])[g], .rset = I32(a[5])[g],
                     .op = -1, .part = (int32_t)g, .keeps = -1, .kind = K_SYNC};
        Key key = {{2, order, g}, 3};
        if (make(s, &init, &key, &made, &syncs[g]) < 0)
            goto done;
        for (Py_ssize_t j = first; j < ntasks; j++)
            if (link_tasks(s, tasks[j], syncs[g]) < 0) goto done;
        for (int32_t j = d0; j < d1; j++)
            count[I32(a[2])[j]]++;
    }
    tstart[groups] = (int32_t)ntasks;
    /* what each device waits for, in group order: count[] becomes offsets */
    int32_t total = 0;
    for (Py_ssize_t d = 0; d <= ndev; d++) {
        int32_t c = count[d];
        count[d] = total;
        total += c;
    }
    ready = malloc((total ? total : 1) * sizeof(int32_t));
    if (!ready) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t g = 0; g < groups; g++) {
        int32_t d0 = I32(a[1])[g], d1 = I32(a[1])[g + 1];
        if (syncs[g] < 0) {
            int32_t d = I32(a[2])[d0];
            for (int32_t j = tstart[g]; j < tstart[g + 1]; j++)
                ready[count[d] + fill[d]++] = tasks[j];
        } else {
            for (int32_t j = d0; j < d1; j++) {
                int32_t d = I32(a[2])[j];
                ready[count[d] + fill[d]++] = syncs[g];
            }
        }
    }
    for (Py_ssize_t j = 0; j < a[8].n; j++) {
        int32_t d = I32(a[8])[j], u;
        Spec init = {.duration = F64(a[9])[j], .nbytes = I64(a[10])[j], .rset = d, .op = -1,
                     .part = d, .keeps = -1, .kind = K_UPDATE};
        Key key = {{3, order, d}, 3};
        if (make(s, &init, &key, &made, &u) < 0 || use_mark(s) < 0)
            goto done;
        for (int32_t i = count[d]; i < count[d] + fill[d]; i++) {
            int32_t t = ready[i];
            if (s->mark[t] == s->stamp) continue;
            s->mark[t] = s->stamp;
            if (link_tasks(s, t, u) < 0) goto done;
        }
    }
    result = made_array(&made);
done:
    free(made.v);
    free(tasks);
    free(tstart);
    free(syncs);
    free(count);
    free(fill);
    free(ready);
    arrs_release(a, 11);
    return result;
}

/* add_gather(op, part, rset, duration, nbytes, key, preds, succs) -> id: an all-gather
 * of a parameter's replica group before op's tasks succs (a sharded parameter's, stage
 * 3), after preds, on the resource set rset, moving nbytes */
PyObject *
Store_add_gather(Store *s, PyObject *args)
{
    int op, part, rset;
    double duration;
    long long nbytes;
    PyObject *key_o, *preds_o, *succs_o;
    if (!PyArg_ParseTuple(args, "iiidLO!OO", &op, &part, &rset, &duration, &nbytes,
                          &PyTuple_Type, &key_o, &preds_o, &succs_o))
        return NULL;
    Key key;
    if (key_arg(key_o, &key) < 0 || rset_check(s, rset) < 0)
        return NULL;
    Ids preds, succs;
    if (ids_get(s, preds_o, &preds, 1) < 0)
        return NULL;
    PyObject *result = NULL;
    if (ids_get(s, succs_o, &succs, 1) < 0) {
        ids_release(&preds);
        return NULL;
    }
    Spec init = {.duration = duration, .nbytes = nbytes, .rset = rset, .op = op,
                 .part = part, .keeps = -1, .kind = K_GATHER};
    int32_t t;
    if (make(s, &init, &key, NULL, &t) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < preds.n; i++)
        if (link_tasks(s, preds.v[i], t) < 0) goto done;
    for (Py_ssize_t i = 0; i < succs.n; i++)
        if (link_tasks(s, t, succs.v[i]) < 0) goto done;
    result = PyLong_FromLong(t);
done:
    ids_release(&preds);
    ids_release(&succs);
    return result;
}
