/* TaskStore in C: the part of a task graph the scheduler reads (durations, tie-break
 * keys, resources, liveness, dependencies), kept in flat C arrays so the event loop
 * runs at C speed, and the event loop itself. It is a drop-in for
 * flextui.sim.taskstore.PyTaskStore: the same methods, the same task ids, and
 * bit-identical times (the same IEEE operations in the same order); tests compare the
 * two. See taskstore.py for what each method means.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KEY_LEN 8     /* a key is a tuple of at most this many ints */
#define KEY_FIELD 16383  /* keys with every int within +-this pack into 128 bits */
#define RES_INLINE 2  /* resources held without a separate allocation */

typedef struct {
    int32_t *v;
    int32_t n, cap;
} Vec;

typedef struct {
    int64_t v[KEY_LEN];
    uint8_t len;
} Key;

/* what the event loop reads; the full keys live apart (they are rarely needed) */
typedef struct {
    double duration;
    uint64_t packed[2];         /* the key, 16 bits an int, 0 for "absent" (see pack) */
    uint8_t alive;
    int32_t nres;
    int32_t res_inline[RES_INLINE];
    int32_t *res_heap;
    Vec preds, succs;
} Task;

typedef struct {
    PyObject_HEAD
    Task *tasks;
    Key *keys;                   /* a slot per task, as tasks */
    Py_ssize_t n, cap;
    int32_t *free_ids;           /* ids to reuse, last freed first */
    Py_ssize_t nfree, free_cap;
    Py_ssize_t num_resources;
    int wide_keys;               /* some key did not pack: compare keys in full */
} Store;

static inline int32_t *
res_of(Task *t)
{
    return t->nres <= RES_INLINE ? t->res_inline : t->res_heap;
}

static int
vec_push(Vec *v, int32_t x)
{
    if (v->n == v->cap) {
        int32_t cap = v->cap ? 2 * v->cap : 4;
        int32_t *nv = realloc(v->v, cap * sizeof(int32_t));
        if (!nv) { PyErr_NoMemory(); return -1; }
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

/* remove the first x, keeping the order (as list.remove does) */
static void
vec_remove(Vec *v, int32_t x)
{
    for (int32_t i = 0; i < v->n; i++) {
        if (v->v[i] == x) {
            memmove(v->v + i, v->v + i + 1, (v->n - i - 1) * sizeof(int32_t));
            v->n--;
            return;
        }
    }
}

static int
check_id(Store *s, Py_ssize_t t)
{
    if (t < 0 || t >= s->n) {
        PyErr_Format(PyExc_IndexError, "task id %zd out of range", t);
        return -1;
    }
    return 0;
}

static Py_ssize_t
id_arg(Store *s, PyObject *v)
{
    Py_ssize_t t = PyLong_AsSsize_t(v);
    if (t == -1 && PyErr_Occurred())
        return -1;
    return check_id(s, t) < 0 ? -1 : t;
}

static void
Store_dealloc(Store *s)
{
    for (Py_ssize_t t = 0; t < s->n; t++) {
        free(s->tasks[t].preds.v);
        free(s->tasks[t].succs.v);
        free(s->tasks[t].res_heap);
    }
    free(s->tasks);
    free(s->keys);
    free(s->free_ids);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int
Store_init(Store *s, PyObject *args, PyObject *kw)
{
    static char *names[] = {"num_resources", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n", names, &s->num_resources))
        return -1;
    return 0;
}

/* The key as two words that compare (hi, then lo) as Python compares the tuples: each
 * int v as v + KEY_FIELD + 1 in 16 bits, and 0 after the key's end, so a key that is a
 * prefix of another is less. Returns 0 when an int is out of range. */
static int
pack(Task *t, const Key *key)
{
    t->packed[0] = t->packed[1] = 0;
    for (int i = 0; i < key->len; i++) {
        if (key->v[i] < -KEY_FIELD || key->v[i] > KEY_FIELD)
            return 0;
        uint64_t field = (uint64_t)(key->v[i] + KEY_FIELD + 1);
        t->packed[i / 4] |= field << (16 * (3 - i % 4));
    }
    return 1;
}

/* add(resources, duration, key) -> id */
static PyObject *
Store_add(Store *s, PyObject *args)
{
    PyObject *resources, *key;
    double duration;
    if (!PyArg_ParseTuple(args, "O!dO!", &PyTuple_Type, &resources, &duration, &PyTuple_Type, &key))
        return NULL;
    Py_ssize_t nres = PyTuple_GET_SIZE(resources), nkey = PyTuple_GET_SIZE(key);
    if (nkey > KEY_LEN) {
        PyErr_Format(PyExc_ValueError, "a task key has at most %d ints", KEY_LEN);
        return NULL;
    }
    Task task = {0};
    Key full = {{0}, (uint8_t)nkey};
    task.duration = duration;
    task.alive = 1;
    for (Py_ssize_t i = 0; i < nkey; i++) {
        full.v[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(key, i));
        if (full.v[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    if (!pack(&task, &full))
        s->wide_keys = 1;
    task.nres = (int32_t)nres;
    if (nres > RES_INLINE && !(task.res_heap = malloc(nres * sizeof(int32_t))))
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nres; i++) {
        Py_ssize_t r = PyLong_AsSsize_t(PyTuple_GET_ITEM(resources, i));
        if (r < 0 || r >= s->num_resources) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_IndexError, "resource %zd out of range", r);
            free(task.res_heap);
            return NULL;
        }
        res_of(&task)[i] = (int32_t)r;
    }
    Py_ssize_t t;
    if (s->nfree) {
        t = s->free_ids[--s->nfree];
        Task *old = &s->tasks[t];
        task.preds = old->preds;      /* keep the (empty) vectors' memory */
        task.succs = old->succs;
        task.preds.n = task.succs.n = 0;
        free(old->res_heap);
    } else {
        if (s->n == s->cap) {
            Py_ssize_t cap = s->cap ? 2 * s->cap : 1024;
            Task *nt = realloc(s->tasks, cap * sizeof(Task));
            if (nt)
                s->tasks = nt;
            Key *nk = nt ? realloc(s->keys, cap * sizeof(Key)) : NULL;
            if (!nk) { free(task.res_heap); return PyErr_NoMemory(); }
            s->keys = nk;
            s->cap = cap;
        }
        t = s->n++;
    }
    s->tasks[t] = task;
    s->keys[t] = full;
    return PyLong_FromSsize_t(t);
}

static PyObject *
Store_link(Store *s, PyObject *args)
{
    Py_ssize_t a, b;
    if (!PyArg_ParseTuple(args, "nn", &a, &b) || check_id(s, a) < 0 || check_id(s, b) < 0)
        return NULL;
    if (vec_push(&s->tasks[a].succs, (int32_t)b) < 0 || vec_push(&s->tasks[b].preds, (int32_t)a) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
push_free(Store *s, Py_ssize_t t)
{
    if (s->nfree == s->free_cap) {
        Py_ssize_t cap = s->free_cap ? 2 * s->free_cap : 256;
        int32_t *nf = realloc(s->free_ids, cap * sizeof(int32_t));
        if (!nf) { PyErr_NoMemory(); return -1; }
        s->free_ids = nf;
        s->free_cap = cap;
    }
    s->free_ids[s->nfree++] = (int32_t)t;
    return 0;
}

/* remove(t): unhook t from its neighbours, forget its edges, free its id */
static PyObject *
Store_remove(Store *s, PyObject *arg)
{
    Py_ssize_t t = id_arg(s, arg);
    if (t < 0)
        return NULL;
    Task *task = &s->tasks[t];
    for (int32_t i = 0; i < task->preds.n; i++)
        vec_remove(&s->tasks[task->preds.v[i]].succs, (int32_t)t);
    for (int32_t i = 0; i < task->succs.n; i++)
        vec_remove(&s->tasks[task->succs.v[i]].preds, (int32_t)t);
    task->preds.n = task->succs.n = 0;
    task->alive = 0;
    if (push_free(s, t) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ids of a list argument, each checked, into a fresh array */
static int32_t *
ids_of(Store *s, PyObject *list, Py_ssize_t *count)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of task ids");
        return NULL;
    }
    *count = PyList_GET_SIZE(list);
    int32_t *ids = malloc((*count ? *count : 1) * sizeof(int32_t));
    if (!ids) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < *count; i++) {
        Py_ssize_t t = id_arg(s, PyList_GET_ITEM(list, i));
        if (t < 0) { free(ids); return NULL; }
        ids[i] = (int32_t)t;
    }
    return ids;
}

/* detach(tasks) / attach(tasks): unhook from (hook back onto) the tasks outside the
 * set, keeping each task's own edge lists; liveness follows */
static PyObject *
hook(Store *s, PyObject *list, int attach)
{
    Py_ssize_t count;
    int32_t *ids = ids_of(s, list, &count);
    if (!ids)
        return NULL;
    uint8_t *in = calloc(s->n ? s->n : 1, 1);
    if (!in) { free(ids); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < count; i++)
        in[ids[i]] = 1;
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < count && result; i++) {
        int32_t t = ids[i];
        Task *task = &s->tasks[t];
        for (int32_t j = 0; j < task->preds.n && result; j++) {
            int32_t p = task->preds.v[j];
            if (in[p]) continue;
            if (attach) { if (vec_push(&s->tasks[p].succs, t) < 0) result = NULL; }
            else vec_remove(&s->tasks[p].succs, t);
        }
        for (int32_t j = 0; j < task->succs.n && result; j++) {
            int32_t u = task->succs.v[j];
            if (in[u]) continue;
            if (attach) { if (vec_push(&s->tasks[u].preds, t) < 0) result = NULL; }
            else vec_remove(&s->tasks[u].preds, t);
        }
        task->alive = (uint8_t)attach;
    }
    free(in);
    free(ids);
    Py_XINCREF(result);
    return result;
}

static PyObject *Store_detach(Store *s, PyObject *list) { return hook(s, list, 0); }
static PyObject *Store_attach(Store *s, PyObject *list) { return hook(s, list, 1); }

/* release(tasks): forget the edges of detached tasks and free their ids */
static PyObject *
Store_release(Store *s, PyObject *list)
{
    Py_ssize_t count;
    int32_t *ids = ids_of(s, list, &count);
    if (!ids)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        s->tasks[ids[i]].preds.n = s->tasks[ids[i]].succs.n = 0;
        if (push_free(s, ids[i]) < 0) { free(ids); return NULL; }
    }
    free(ids);
    Py_RETURN_NONE;
}

static PyObject *
vec_list(Vec *v)
{
    PyObject *list = PyList_New(v->n);
    if (!list)
        return NULL;
    for (int32_t i = 0; i < v->n; i++) {
        PyObject *x = PyLong_FromLong(v->v[i]);
        if (!x) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

static PyObject *
Store_preds(Store *s, PyObject *arg)
{
    Py_ssize_t t = id_arg(s, arg);
    return t < 0 ? NULL : vec_list(&s->tasks[t].preds);
}

static PyObject *
Store_succs(Store *s, PyObject *arg)
{
    Py_ssize_t t = id_arg(s, arg);
    return t < 0 ? NULL : vec_list(&s->tasks[t].succs);
}

static PyObject *
Store_alive(Store *s, PyObject *arg)
{
    Py_ssize_t t = id_arg(s, arg);
    if (t < 0)
        return NULL;
    return PyBool_FromLong(s->tasks[t].alive);
}

static PyObject *
Store_duration(Store *s, PyObject *arg)
{
    Py_ssize_t t = id_arg(s, arg);
    return t < 0 ? NULL : PyFloat_FromDouble(s->tasks[t].duration);
}

static PyObject *
Store_live_ids(Store *s, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    for (Py_ssize_t t = 0; list && t < s->n; t++) {
        if (!s->tasks[t].alive) continue;
        PyObject *x = PyLong_FromSsize_t(t);
        if (!x || PyList_Append(list, x) < 0) { Py_XDECREF(x); Py_CLEAR(list); break; }
        Py_DECREF(x);
    }
    return list;
}

static Py_ssize_t
Store_len(Store *s)
{
    return s->n;
}

/* -- the event loop ---------------------------------------------------------------- */

typedef struct {
    double ready;
    uint64_t hi, lo;            /* the task's packed key */
    int32_t task;
} Item;

/* (ready, key, task) order, as Python compares the tuples its heapq holds; the packed
 * keys decide unless some key did not pack (keys == NULL when every key did) */
static inline int
item_less(const Key *keys, const Item *a, const Item *b)
{
    if (a->ready != b->ready)
        return a->ready < b->ready;
    if (!keys) {
        if (a->hi != b->hi)
            return a->hi < b->hi;
        if (a->lo != b->lo)
            return a->lo < b->lo;
        return a->task < b->task;
    }
    const Key *x = &keys[a->task], *y = &keys[b->task];
    int n = x->len < y->len ? x->len : y->len;
    for (int i = 0; i < n; i++)
        if (x->v[i] != y->v[i])
            return x->v[i] < y->v[i];
    if (x->len != y->len)
        return x->len < y->len;
    return a->task < b->task;
}

static inline void
set_item(Item *item, const Task *tasks, int32_t t, double ready)
{
    item->ready = ready;
    item->hi = tasks[t].packed[0];
    item->lo = tasks[t].packed[1];
    item->task = t;
}

static void
sift_down(const Key *keys, Item *heap, Py_ssize_t size, Py_ssize_t i)
{
    Item item = heap[i];
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= size)
            break;
        if (child + 1 < size && item_less(keys, &heap[child + 1], &heap[child]))
            child++;
        if (!item_less(keys, &heap[child], &item))
            break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = item;
}

static void
sift_up(const Key *keys, Item *heap, Py_ssize_t i)
{
    Item item = heap[i];
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!item_less(keys, &item, &heap[parent]))
            break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = item;
}

/* the writable buffer of an array(code) with a slot per task (items of size bytes) */
static void *
column(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what, const char *code,
       Py_ssize_t size)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return NULL;
    if (view->itemsize != size || !view->format || strcmp(view->format, code) != 0
            || view->len < n * size) {
        PyErr_Format(PyExc_TypeError, "%s must be an array('%s') with a slot per task", what,
                     code);
        PyBuffer_Release(view);
        view->obj = NULL;
        return NULL;
    }
    return view->buf;
}

/* what a task is to this run of the loop (the low two bits), and whether it is fresh */
enum { UNTOUCHED = 0, WAITING = 1, QUEUED = 2, DONE = 3, STATE = 3, FRESH = 4 };

typedef struct {
    const Task *tasks;
    const Key *keys;             /* for item_less */
    double *ready, *end;
    uint8_t *state;
    int32_t *waiting;
    Item *heap;
    Py_ssize_t size;
} Loop;

/* u's times may change: it waits for its predecessors not yet simulated, its ready time
 * so far from those that are; with none left, it is queued */
static void
defer(Loop *L, int32_t u)
{
    const Task *task = &L->tasks[u];
    int32_t left = 0;
    double r = 0.0;
    for (int32_t j = 0; j < task->preds.n; j++) {
        int32_t p = task->preds.v[j];
        if ((L->state[p] & STATE) != DONE) left++;
        else if (L->end[p] > r) r = L->end[p];
    }
    L->ready[u] = r;
    L->state[u] = (uint8_t)((L->state[u] & FRESH) | (left ? WAITING : QUEUED));
    L->waiting[u] = left;
    if (!left) {
        set_item(&L->heap[L->size], L->tasks, u, r);
        sift_up(L->keys, L->heap, L->size++);
    }
}

/* a fresh task: added, or one whose predecessors changed; it cannot have been kept */
static int
freshen(Loop *L, int32_t u)
{
    if ((L->state[u] & STATE) == DONE) {
        PyErr_Format(PyExc_RuntimeError, "task %d changed but is ready before t0", (int)u);
        return -1;
    }
    if (L->state[u] == UNTOUCHED && L->tasks[u].alive) {
        L->state[u] = FRESH;
        defer(L, u);
    }
    return 0;
}

/* time.monotonic(), or -1.0 with an exception set */
static double
monotonic(void)
{
    PyObject *time = PyImport_ImportModule("time");
    PyObject *now = time ? PyObject_CallMethod(time, "monotonic", NULL) : NULL;
    double value = now ? PyFloat_AsDouble(now) : -1.0;
    Py_XDECREF(now);
    Py_XDECREF(time);
    return value;
}

/* how many tasks the loop simulates between looks at the clock (taskstore.CLOCK_EVERY) */
#define CLOCK_EVERY 4096

/* reschedule(ready, start, end, order, t0, changed, removed[, limit[, deadline]]) ->
 * makespan, or the first end time past limit (the run stops there); TimeoutError once
 * time.monotonic() passes deadline */
static PyObject *
Store_reschedule(Store *s, PyObject *args)
{
    PyObject *ready_o, *start_o, *end_o, *order_o, *changed, *removed;
    double t0, limit = Py_HUGE_VAL, deadline = Py_HUGE_VAL;
    if (!PyArg_ParseTuple(args, "OOOOdO!O!|dd", &ready_o, &start_o, &end_o, &order_o, &t0,
                          &PyList_Type, &changed, &PyList_Type, &removed, &limit, &deadline))
        return NULL;
    Py_ssize_t n = s->n, nr = s->num_resources, m = 0, count = 0, i;
    Py_buffer vr = {0}, vs = {0}, ve = {0}, vo = {0};
    double *ready = column(ready_o, &vr, n, "ready", "d", sizeof(double));
    double *start = ready ? column(start_o, &vs, n, "start", "d", sizeof(double)) : NULL;
    double *end = start ? column(end_o, &ve, n, "end", "d", sizeof(double)) : NULL;
    int32_t *order = end ? column(order_o, &vo, n, "order", "i", sizeof(int32_t)) : NULL;
    double *free_at = calloc(nr ? nr : 1, sizeof(double));
    uint8_t *state = calloc(n ? n : 1, 1);
    int32_t *old = malloc((n ? n : 1) * sizeof(int32_t));
    int32_t *out = malloc((n ? n : 1) * sizeof(int32_t));
    int32_t *waiting = malloc((n ? n : 1) * sizeof(int32_t));
    Item *heap = malloc((n ? n : 1) * sizeof(Item));
    PyObject *result = NULL;
    double makespan = 0.0;
    const Task *tasks = s->tasks;
    Loop L = {tasks, s->wide_keys ? s->keys : NULL, ready, end, state, waiting, heap, 0};
    if (!order)
        goto done;
    if (!free_at || !state || !old || !out || !waiting || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    /* check every id first: nothing is written unless all are valid */
    for (i = 0; i < PyList_GET_SIZE(changed); i++)
        if (id_arg(s, PyList_GET_ITEM(changed, i)) < 0) goto done;
    for (i = 0; i < PyList_GET_SIZE(removed); i++)
        if (id_arg(s, PyList_GET_ITEM(removed, i)) < 0) goto done;
    while (m < n && order[m] >= 0) {
        if (order[m] >= n) {
            PyErr_Format(PyExc_IndexError, "task id %d in order out of range", (int)order[m]);
            goto done;
        }
        old[m] = order[m];
        m++;
    }
    /* the last run's tasks ready before t0 keep their times, and give the resources'
     * state at t0 */
    for (i = 0; i < m && ready[old[i]] < t0; i++) {
        int32_t t = old[i];
        const Task *task = &tasks[t];
        if (!task->alive)
            continue;
        state[t] = DONE;
        out[count++] = t;
        const int32_t *res = res_of((Task *)task);
        for (int32_t j = 0; j < task->nres; j++)
            if (end[t] > free_at[res[j]]) free_at[res[j]] = end[t];
    }
    Py_ssize_t sweep = i, kept = count;
    if (m == 0) {   /* no last run: every task is fresh */
        for (Py_ssize_t t = 0; t < n; t++)
            if (tasks[t].alive && freshen(&L, (int32_t)t) < 0) goto done;
    }
    for (i = 0; i < PyList_GET_SIZE(changed); i++)
        if (freshen(&L, (int32_t)PyLong_AsSsize_t(PyList_GET_ITEM(changed, i))) < 0) goto done;
    for (i = 0; i < PyList_GET_SIZE(removed); i++) {
        const Task *gone = &tasks[PyLong_AsSsize_t(PyList_GET_ITEM(removed, i))];
        for (int32_t j = 0; j < gone->succs.n; j++)
            if (freshen(&L, gone->succs.v[j]) < 0) goto done;
    }
    /* the rest of the last run's order, merged with the queue of tasks whose ready time
     * changed: a task whose predecessors kept their end times keeps its ready time and
     * its place in the order, and needs no queue */
    for (;;) {
        int32_t t = -1;
        double r = 0.0;
        if (deadline < Py_HUGE_VAL && (count - kept) % CLOCK_EVERY == 0) {
            double now = monotonic();
            if (now < 0 && PyErr_Occurred())
                goto done;
            if (now > deadline) {
                PyErr_SetString(PyExc_TimeoutError, "the simulation ran past its deadline");
                goto done;
            }
        }
        while (sweep < m && (state[old[sweep]] != UNTOUCHED || !tasks[old[sweep]].alive))
            sweep++;
        if (sweep < m) {
            int32_t c = old[sweep];
            Item here;
            set_item(&here, tasks, c, ready[c]);
            if (!L.size || item_less(L.keys, &here, &heap[0])) {
                sweep++;
                const Task *task = &tasks[c];
                int32_t j = 0;
                while (j < task->preds.n && (state[task->preds.v[j]] & STATE) == DONE)
                    j++;
                if (j < task->preds.n) {   /* a predecessor was re-simulated later */
                    defer(&L, c);
                    continue;
                }
                t = c;
                r = ready[c];
            }
        }
        if (t < 0) {
            if (!L.size)
                break;
            Item item = heap[0];
            heap[0] = heap[--L.size];
            if (L.size)
                sift_down(L.keys, heap, L.size, 0);
            t = item.task;
            r = item.ready;
        }
        const Task *task = &tasks[t];
        const int32_t *res = res_of((Task *)task);
        double st = r;
        for (int32_t j = 0; j < task->nres; j++)
            if (free_at[res[j]] > st) st = free_at[res[j]];
        double e = st + task->duration;
        if (e > limit) {   /* the makespan is past limit: stop, leaving times half done */
            result = PyFloat_FromDouble(e);
            goto done;
        }
        for (int32_t j = 0; j < task->nres; j++)
            free_at[res[j]] = e;
        int moved = (state[t] & FRESH) || e != end[t];
        start[t] = st;
        end[t] = e;
        out[count++] = t;
        /* t is done only after this loop: a successor deferred here waits for t too,
         * once per edge (edges may repeat), and is released below like any other */
        for (int32_t j = 0; j < task->succs.n; j++) {
            int32_t u = task->succs.v[j];
            if (state[u] == UNTOUCHED) {
                if (!moved) continue;
                defer(&L, u);
            }
            if ((state[u] & STATE) != WAITING) {
                PyErr_Format(PyExc_RuntimeError, "task %d follows re-simulated task %d but "
                             "is not re-simulated itself", (int)u, (int)t);
                goto done;
            }
            if (e > ready[u]) ready[u] = e;
            if (--waiting[u] == 0) {
                state[u] = (uint8_t)((state[u] & FRESH) | QUEUED);
                set_item(&heap[L.size], tasks, u, ready[u]);
                sift_up(L.keys, heap, L.size++);
            }
        }
        state[t] = DONE;
    }
    for (i = 0; i < n; i++) {
        if ((state[i] & STATE) == WAITING) {
            Py_ssize_t stuck = 0;
            for (; i < n; i++) stuck += (state[i] & STATE) == WAITING;
            PyErr_Format(PyExc_RuntimeError, "task graph has a cycle through %zd tasks", stuck);
            goto done;
        }
    }
    for (i = 0; i < nr; i++)
        if (free_at[i] > makespan) makespan = free_at[i];
    for (i = kept; i < count; i++)
        if (end[out[i]] > makespan) makespan = end[out[i]];
    memcpy(order, out, count * sizeof(int32_t));
    if (count < n)
        order[count] = -1;
    result = PyFloat_FromDouble(makespan);
done:
    if (vo.obj) PyBuffer_Release(&vo);
    if (ve.obj) PyBuffer_Release(&ve);
    if (vs.obj) PyBuffer_Release(&vs);
    if (vr.obj) PyBuffer_Release(&vr);
    free(free_at);
    free(state);
    free(old);
    free(out);
    free(waiting);
    free(heap);
    return result;
}

static PyMethodDef Store_methods[] = {
    {"add", (PyCFunction)Store_add, METH_VARARGS, "add(resources, duration, key) -> task id"},
    {"link", (PyCFunction)Store_link, METH_VARARGS, "link(a, b): b depends on a"},
    {"remove", (PyCFunction)Store_remove, METH_O, "remove(t): delete a task and its edges"},
    {"detach", (PyCFunction)Store_detach, METH_O, "detach(tasks): unhook, keeping own edges"},
    {"attach", (PyCFunction)Store_attach, METH_O, "attach(tasks): undo detach"},
    {"release", (PyCFunction)Store_release, METH_O, "release(tasks): free detached tasks"},
    {"preds", (PyCFunction)Store_preds, METH_O, "preds(t) -> list of task ids"},
    {"succs", (PyCFunction)Store_succs, METH_O, "succs(t) -> list of task ids"},
    {"alive", (PyCFunction)Store_alive, METH_O, "alive(t) -> bool"},
    {"duration_of", (PyCFunction)Store_duration, METH_O, "duration_of(t) -> seconds"},
    {"live_ids", (PyCFunction)Store_live_ids, METH_NOARGS, "live task ids, ascending"},
    {"reschedule", (PyCFunction)Store_reschedule, METH_VARARGS,
     "reschedule(ready, start, end, order, t0, changed, removed[, limit[, deadline]]) -> "
     "makespan"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Store_as_sequence = {
    .sq_length = (lenfunc)Store_len,
};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flextui.sim._ctaskstore.CTaskStore",
    .tp_basicsize = sizeof(Store),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A task graph's scheduling data in C arrays (see flextui.sim.taskstore).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Store_init,
    .tp_dealloc = (destructor)Store_dealloc,
    .tp_methods = Store_methods,
    .tp_as_sequence = &Store_as_sequence,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ctaskstore", "A task graph's scheduling data and event loop in C.",
    -1, NULL,
};

PyMODINIT_FUNC
PyInit__ctaskstore(void)
{
    if (PyType_Ready(&StoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&StoreType);
    if (PyModule_AddObject(m, "CTaskStore", (PyObject *)&StoreType) < 0) {
        Py_DECREF(&StoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
