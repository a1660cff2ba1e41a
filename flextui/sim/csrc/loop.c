/* The event loop (see pystore.py: reschedule), its undo journal, and the t0 of an edit. */

#include "store.h"

#include <stdlib.h>
#include <string.h>

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

/* -- the journal -------------------------------------------------------------------- */

void
journal_free(Journal *j)
{
    free(j->saved);
    free(j->order);
    memset(j, 0, sizeof(*j));
}

/* keep t's times as they are before the run writes them */
static int
journal_save(Journal *j, int32_t t, const double *ready, const double *start, const double *end)
{
    if (!j->active)
        return 0;
    if (j->nsaved == j->cap) {
        Py_ssize_t cap = j->cap ? 2 * j->cap : 1024;
        Saved *ns = realloc(j->saved, cap * sizeof(Saved));
        if (!ns) return PyErr_NoMemory(), -1;
        j->saved = ns;
        j->cap = cap;
    }
    j->saved[j->nsaved++] = (Saved){ready[t], start[t], end[t], t};
    return 0;
}

/* keep order[from..to) as it is before the run writes it */
static int
journal_order(Journal *j, const int32_t *order, Py_ssize_t from, Py_ssize_t to)
{
    if (!j->active)
        return 0;
    if (to - from > j->order_cap) {
        int32_t *no = realloc(j->order, (to - from) * sizeof(int32_t));
        if (!no) return PyErr_NoMemory(), -1;
        j->order = no;
        j->order_cap = to - from;
    }
    memcpy(j->order, order + from, (to - from) * sizeof(int32_t));
    j->from = from;
    j->to = to;
    return 0;
}

/* -- checkpoints --------------------------------------------------------------------- */

/* ready the checkpoints for a run over order (n tasks): at most 64 of them, kept only
 * while the spacing, the order's buffer and the resources stay what they were */
static int
use_checkpoints(Store *s, const int32_t *order, Py_ssize_t n)
{
    Py_ssize_t K = 256, nr = s->num_resources ? s->num_resources : 1;
    while (K * 64 < n)
        K *= 2;
    if (K != s->ckpt_every || order != s->ckpt_order) {
        s->ckpt_every = K;
        s->nckpt = 0;
    }
    Py_ssize_t need = (n / K + 2) * 2 * nr;
    if (need > s->ckpt_cap) {
        double *nc = realloc(s->ckpt, need * sizeof(double));
        if (!nc) return PyErr_NoMemory(), -1;
        s->ckpt = nc;
        s->ckpt_cap = need;
    }
    return 0;
}

/* checkpoint c: the free times and the work done per resource */
static void
save_checkpoint(Store *s, Py_ssize_t c, const double *free_at, const int64_t *done)
{
    Py_ssize_t nr = s->num_resources;
    memcpy(s->ckpt + 2 * c * nr, free_at, nr * sizeof(double));
    memcpy(s->ckpt + (2 * c + 1) * nr, done, nr * sizeof(int64_t));
}

static void
load_checkpoint(const Store *s, Py_ssize_t c, double *free_at, int64_t *done)
{
    Py_ssize_t nr = s->num_resources;
    memcpy(free_at, s->ckpt + 2 * c * nr, nr * sizeof(double));
    memcpy(done, s->ckpt + (2 * c + 1) * nr, nr * sizeof(int64_t));
}

/* -- the loop ----------------------------------------------------------------------- */

/* what a task is to this run of the loop (the low two bits), and whether it is fresh */
enum { UNTOUCHED = 0, WAITING = 1, QUEUED = 2, DONE = 3, STATE = 3, FRESH = 4 };

typedef struct {
    const Task *tasks;
    const Key *keys;             /* for item_less */
    double *ready, *start, *end;
    uint8_t *state;
    int32_t *waiting;
    Item *heap;
    Py_ssize_t size;
    Journal *journal;
} Loop;

/* u's times may change: it waits for its predecessors not yet simulated, its ready time
 * so far from those that are; with none left, it is queued */
static inline __attribute__((always_inline)) int
defer(Loop *L, int32_t u)
{
    const Task *task = &L->tasks[u];
    int32_t left = 0;
    double r = 0.0;
    if (journal_save(L->journal, u, L->ready, L->start, L->end) < 0)
        return -1;
    const int32_t *preds = vec_citems(&task->preds);
    for (int32_t j = 0; j < task->preds.n; j++) {
        int32_t p = preds[j];
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
    return 0;
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
        return defer(L, u);
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

/* how far ahead in the last order the loop fetches tasks and times into the cache: a
 * run walks the order in time, not id, order, so each task is a cache miss otherwise */
#define PREFETCH 12

/* a run stops once a resource's free time plus the work still queued for it passes
 * limit by BOUND_MARGIN of itself, and returns the bound less BOUND_SHAVE of itself:
 * still past limit, and never more than the makespan (the bound's own rounding is
 * under 1e-15 of it) */
#define BOUND_MARGIN 4e-15
#define BOUND_SHAVE 1e-15

/* how many tasks the loop simulates between looks at the clock (taskstore.CLOCK_EVERY) */
#define CLOCK_EVERY 4096

/* reschedule(ready, start, end, order, t0, changed, removed[, limit[, deadline[,
 * journal]]]) -> makespan, or the first end time past limit (the run stops there);
 * TimeoutError once time.monotonic() passes deadline. With journal, what the run
 * writes can be undone (undo) until the next run or forget. */
PyObject *
Store_reschedule(Store *s, PyObject *args, PyObject *kw)
{
    static char *names[] = {"ready", "start", "end", "order", "t0", "changed", "removed",
                            "limit", "deadline", "journal", NULL};
    PyObject *ready_o, *start_o, *end_o, *order_o, *changed_o, *removed_o;
    double t0, limit = Py_HUGE_VAL, deadline = Py_HUGE_VAL;
    int journal = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOdOO|ddp", names, &ready_o, &start_o,
                                     &end_o, &order_o, &t0, &changed_o, &removed_o, &limit,
                                     &deadline, &journal))
        return NULL;
    Py_ssize_t n = s->n, nr = s->num_resources, m = 0, count = 0, i;
    Ids changed = {0}, removed = {0};
    Py_buffer vr = {0}, vs = {0}, ve = {0}, vo = {0};
    double *ready = column(ready_o, &vr, n, "ready", "d", sizeof(double), 1);
    double *start = ready ? column(start_o, &vs, n, "start", "d", sizeof(double), 1) : NULL;
    double *end = start ? column(end_o, &ve, n, "end", "d", sizeof(double), 1) : NULL;
    int32_t *order = end ? column(order_o, &vo, n, "order", "i", sizeof(int32_t), 1) : NULL;
    double *free_at = calloc(nr ? nr : 1, sizeof(double));
    int64_t *done_work = calloc(nr ? nr : 1, sizeof(int64_t));
    uint8_t *state = calloc(n ? n : 1, 1);
    int32_t *out = malloc((n ? n : 1) * sizeof(int32_t));
    int32_t *waiting = malloc((n ? n : 1) * sizeof(int32_t));
    Item *heap = malloc((n ? n : 1) * sizeof(Item));
    PyObject *result = NULL;
    double makespan = 0.0;
    const Task *tasks = s->tasks;
    Journal *J = &s->journal;
    J->active = 0;
    J->nsaved = 0;
    J->from = J->to = 0;
    J->ckpt_from = PY_SSIZE_T_MAX;
    Loop L = {tasks, s->keys, ready, start, end, state, waiting, heap, 0, J};
    if (!order)
        goto done;
    if (!free_at || !done_work || !state || !out || !waiting || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    /* check every id first: nothing is written unless all are valid */
    if (ids_get(s, changed_o, &changed, 1) < 0 || ids_get(s, removed_o, &removed, 1) < 0)
        goto done;
    while (m < n && order[m] >= 0) {
        if (order[m] >= n) {
            PyErr_Format(PyExc_IndexError, "task id %d in order out of range", (int)order[m]);
            goto done;
        }
        m++;
    }
    J->active = journal;
    /* the last run's tasks ready before t0 keep their times, and give the resources'
     * state at t0: the order is by ready time, so they are the first i, found by
     * bisection; the state comes from the last checkpoint before i and the few tasks
     * after it, so a run costs the tasks it re-times, not the graph's size */
    if (use_checkpoints(s, order, n) < 0)
        goto done;
    Py_ssize_t lo = 0, hi = m, K = s->ckpt_every;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (ready[order[mid]] < t0) lo = mid + 1;
        else hi = mid;
    }
    i = lo;
    Py_ssize_t c = i / K < s->nckpt ? i / K : s->nckpt - 1, p = 0;
    if (c >= 0) {
        load_checkpoint(s, c, free_at, done_work);
        p = c * K;
    }
    for (; p < i; p++) {
        if (p % K == 0 && p / K == s->nckpt)
            save_checkpoint(s, s->nckpt++, free_at, done_work);
        int32_t t = order[p], nres;
        const int32_t *res = rset_items(s, tasks[t].rset, &nres);
        int64_t units = work_of(tasks[t].duration);
        for (int32_t j = 0; j < nres; j++) {
            if (end[t] > free_at[res[j]]) free_at[res[j]] = end[t];
            done_work[res[j]] += units;
        }
    }
    for (p = 0; p < i; p++)
        state[order[p]] = DONE;
    memcpy(out, order, i * sizeof(int32_t));
    count = i;
    Py_ssize_t sweep = i, kept = count;
    /* the checkpoints from the first one after kept on are this run's */
    J->ckpt_from = (kept + K - 1) / K;
    if (s->nckpt > J->ckpt_from)
        s->nckpt = J->ckpt_from;
    /* the run rewrites order from kept on */
    if (journal_order(J, order, kept, m) < 0)
        goto done;
    const int32_t *old = order;   /* written only once the run is through */
    if (m == 0) {   /* no last run: every task is fresh */
        for (Py_ssize_t t = 0; t < n; t++)
            if (tasks[t].alive && freshen(&L, (int32_t)t) < 0) goto done;
    }
    for (i = 0; i < changed.n; i++)
        if (freshen(&L, changed.v[i]) < 0) goto done;
    for (i = 0; i < removed.n; i++) {
        const Task *gone = &tasks[removed.v[i]];
        for (int32_t j = 0; j < gone->succs.n; j++)
            if (freshen(&L, vec_citems(&gone->succs)[j]) < 0) goto done;
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
        if (sweep + PREFETCH < m) {   /* the tasks the sweep reaches next: fetch them early */
            int32_t ahead = old[sweep + PREFETCH];
            __builtin_prefetch(&tasks[ahead]);
            __builtin_prefetch(&ready[ahead]);
            __builtin_prefetch(&end[ahead], 1);
            __builtin_prefetch(&start[ahead], 1);
        }
        if (sweep < m) {
            int32_t c = old[sweep];
            Item here;
            set_item(&here, tasks, c, ready[c]);
            if (!L.size || item_less(L.keys, &here, &heap[0])) {
                sweep++;
                const Task *task = &tasks[c];
                const int32_t *preds = vec_citems(&task->preds);
                int32_t j = 0;
                while (j < task->preds.n && (state[preds[j]] & STATE) == DONE)
                    j++;
                if (j < task->preds.n) {   /* a predecessor was re-simulated later */
                    if (defer(&L, c) < 0) goto done;
                    continue;
                }
                if (journal_save(J, c, ready, start, end) < 0)
                    goto done;
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
        if (count % K == 0 && count / K == s->nckpt)
            save_checkpoint(s, s->nckpt++, free_at, done_work);
        const Task *task = &tasks[t];
        int32_t nres;
        const int32_t *res = rset_items(s, task->rset, &nres);
        double st = r;
        for (int32_t j = 0; j < nres; j++)
            if (free_at[res[j]] > st) st = free_at[res[j]];
        double e = st + task->duration;
        if (e > limit) {   /* the makespan is past limit: stop, leaving times half done */
            result = PyFloat_FromDouble(e);
            goto done;
        }
        int64_t units = work_of(task->duration);
        for (int32_t j = 0; j < nres; j++) {
            free_at[res[j]] = e;
            done_work[res[j]] += units;
            /* the resource is free at e and its tasks still to run take at least the
             * work left on it: past limit (with a margin for rounding), stop there */
            if (limit < Py_HUGE_VAL) {
                double bound = e + (double)(s->work[res[j]] - done_work[res[j]]) * WORK_UNIT;
                if (bound > limit + BOUND_MARGIN * (limit > 0 ? limit : -limit)) {
                    result = PyFloat_FromDouble(bound - BOUND_SHAVE * bound);
                    goto done;
                }
            }
        }
        int moved = (state[t] & FRESH) || e != end[t];
        start[t] = st;
        end[t] = e;
        out[count++] = t;
        /* t is done only after this loop: a successor deferred here waits for t too,
         * once per edge (edges may repeat), and is released below like any other */
        const int32_t *succs = vec_citems(&task->succs);
        for (int32_t j = 0; j < task->succs.n; j++)
            __builtin_prefetch(&tasks[succs[j]]);
        for (int32_t j = 0; j < task->succs.n; j++) {
            int32_t u = succs[j];
            if (state[u] == UNTOUCHED) {
                if (!moved) continue;
                if (defer(&L, u) < 0) goto done;
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
    s->ckpt_order = order;
    result = PyFloat_FromDouble(makespan);
done:
    if (!result || PyFloat_AsDouble(result) > limit) {   /* stopped: not a schedule */
        if (s->nckpt > J->ckpt_from)
            s->nckpt = J->ckpt_from;
    }
    ids_release(&changed);
    ids_release(&removed);
    if (vo.obj) PyBuffer_Release(&vo);
    if (ve.obj) PyBuffer_Release(&ve);
    if (vs.obj) PyBuffer_Release(&vs);
    if (vr.obj) PyBuffer_Release(&vr);
    free(free_at);
    free(done_work);
    free(state);
    free(out);
    free(waiting);
    free(heap);
    return result;
}

/* undo(ready, start, end, order): the columns as they were before the journaled run */
PyObject *
Store_undo(Store *s, PyObject *args)
{
    PyObject *ready_o, *start_o, *end_o, *order_o;
    if (!PyArg_ParseTuple(args, "OOOO", &ready_o, &start_o, &end_o, &order_o))
        return NULL;
    Journal *J = &s->journal;
    if (!J->active) {
        PyErr_SetString(PyExc_RuntimeError, "no journaled reschedule to undo");
        return NULL;
    }
    Py_ssize_t n = s->n;
    Py_buffer vr = {0}, vs = {0}, ve = {0}, vo = {0};
    double *ready = column(ready_o, &vr, n, "ready", "d", sizeof(double), 1);
    double *start = ready ? column(start_o, &vs, n, "start", "d", sizeof(double), 1) : NULL;
    double *end = start ? column(end_o, &ve, n, "end", "d", sizeof(double), 1) : NULL;
    int32_t *order = end ? column(order_o, &vo, J->to, "order", "i", sizeof(int32_t), 1)
                         : NULL;
    PyObject *result = NULL;
    if (order) {
        for (Py_ssize_t i = J->nsaved - 1; i >= 0; i--) {   /* the first saved wins */
            const Saved *saved = &J->saved[i];
            if (saved->task >= n) continue;
            ready[saved->task] = saved->ready;
            start[saved->task] = saved->start;
            end[saved->task] = saved->end;
        }
        memcpy(order + J->from, J->order, (J->to - J->from) * sizeof(int32_t));
        if (J->to < vo.len / (Py_ssize_t)sizeof(int32_t))
            order[J->to] = -1;
        J->active = 0;
        if (s->nckpt > J->ckpt_from)
            s->nckpt = J->ckpt_from;
        result = Py_None;
        Py_INCREF(result);
    }
    if (vo.obj) PyBuffer_Release(&vo);
    if (ve.obj) PyBuffer_Release(&ve);
    if (vs.obj) PyBuffer_Release(&vs);
    if (vr.obj) PyBuffer_Release(&vr);
    return result;
}

PyObject *
Store_forget(Store *s, PyObject *unused)
{
    s->journal.active = 0;
    s->journal.nsaved = 0;
    Py_RETURN_NONE;
}

/* earliest_ready(ready, end, added, removed) -> t0: the earliest ready time of a removed
 * task, or lower bound on an added one's (the latest end of its predecessors from before
 * the edit, 0 with none; an added task all of whose predecessors are added adds none) */
PyObject *
Store_earliest_ready(Store *s, PyObject *args)
{
    PyObject *ready_o, *end_o, *added_o, *removed_o;
    if (!PyArg_ParseTuple(args, "OOOO", &ready_o, &end_o, &added_o, &removed_o))
        return NULL;
    Ids added = {0}, removed = {0};
    Py_buffer vr = {0}, ve = {0};
    PyObject *result = NULL;
    double t0 = Py_HUGE_VAL;
    if (ids_get(s, added_o, &added, 1) < 0 || ids_get(s, removed_o, &removed, 1) < 0)
        goto done;
    const double *ready = column(ready_o, &vr, 0, "ready", "d", sizeof(double), 0);
    const double *end = ready ? column(end_o, &ve, 0, "end", "d", sizeof(double), 0) : NULL;
    if (!end || use_mark(s) < 0)
        goto done;
    Py_ssize_t known_n = vr.len / (Py_ssize_t)sizeof(double);
    for (Py_ssize_t i = 0; i < removed.n; i++)
        if (removed.v[i] < known_n && ready[removed.v[i]] < t0) t0 = ready[removed.v[i]];
    for (Py_ssize_t i = 0; i < added.n; i++)
        s->mark[added.v[i]] = s->stamp;
    for (Py_ssize_t i = 0; i < added.n; i++) {
        const Task *task = &s->tasks[added.v[i]];
        double latest = 0.0;
        int known = 0;
        for (int32_t j = 0; j < task->preds.n; j++) {
            int32_t p = vec_citems(&task->preds)[j];
            if (s->mark[p] == s->stamp) continue;
            known = 1;
            if (p < known_n && end[p] > latest) latest = end[p];
        }
        if ((known || !task->preds.n) && latest < t0)
            t0 = latest;
    }
    result = PyFloat_FromDouble(t0);
done:
    ids_release(&added);
    ids_release(&removed);
    if (ve.obj) PyBuffer_Release(&ve);
    if (vr.obj) PyBuffer_Release(&vr);
    return result;
}
