/* The task store in C: what a task graph is made of (every task's kind, owner, cost,
 * tie-break key, resources and dependencies), its bulk construction, and the event loop
 * that schedules it. A drop-in for flextui.sim.pystore.PyTaskStore: the same methods,
 * the same task ids and bit-identical times (the same IEEE operations in the same
 * order); tests compare the two. See pystore.py for what each method means.
 *
 * store.c: the type, its data and the per-task methods; build.c: tasks made in bulk
 * for an op, an edge and a parameter; loop.c: the event loop and its undo journal;
 * plan.c: an edge's overlaps and hops in bulk (module functions, for plans.py).
 */
#ifndef FLEXTUI_STORE_H
#define FLEXTUI_STORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define KEY_LEN 8        /* a key is a tuple of at most this many ints */
#define KEY_FIELD 16383  /* keys with every int within +-this pack into 128 bits */

/* taskgraph.TaskKind */
enum { K_FORWARD = 0, K_BACKWARD = 1, K_TRANSFER = 2, K_SYNC = 3, K_UPDATE = 4, K_GATHER = 5 };

/* a task's predecessors or successors: up to VEC_INLINE held in place (most tasks have
 * one or two, and the event loop reads them without another cache miss), more in a
 * separate allocation */
#define VEC_INLINE 2
typedef struct {
    int32_t n, cap;          /* cap <= VEC_INLINE: the items are in place */
    union {
        int32_t in[VEC_INLINE];
        int32_t *heap;
    } u;
} Vec;

static inline int32_t *
vec_items(Vec *v)
{
    return v->cap > VEC_INLINE ? v->u.heap : v->u.in;
}

static inline const int32_t *
vec_citems(const Vec *v)
{
    return v->cap > VEC_INLINE ? v->u.heap : v->u.in;
}

typedef struct {
    int64_t v[KEY_LEN];
    uint8_t len;
} Key;

/* what the event loop reads of a task: one 64-byte cache line (the array is aligned) */
typedef struct {
    double duration;
    uint64_t packed[2];     /* the key, 16 bits an int, 0 for "absent" (see pack_key) */
    int32_t rset;           /* the resource set it holds */
    uint8_t kind, alive;
    Vec preds, succs;
} Task;

/* the rest of a task, which timelines and memory accounts read: 32 bytes */
typedef struct {
    int64_t nbytes;         /* bytes moved (transfers, syncs), kept (forward), updated */
    int64_t workspace;
    int32_t op, part;       /* the op (-1: syncs, updates) and the task's index in it */
    int32_t keeps;          /* the device that keeps nbytes as an activation, or -1 */
} Info;

/* a task to make: both halves */
typedef struct {
    double duration;
    int64_t nbytes, workspace;
    int32_t rset, op, part, keeps;
    uint8_t kind;
} Spec;

/* one entry of the undo journal: a task's times before a reschedule wrote them */
typedef struct {
    double ready, start, end;
    int32_t task;
} Saved;

typedef struct {
    int active;
    Saved *saved;
    Py_ssize_t nsaved, cap;
    int32_t *order;          /* order[from..to) before the run */
    Py_ssize_t from, to, order_cap;
    Py_ssize_t ckpt_from;    /* the first checkpoint the run rewrote */
} Journal;

typedef struct {
    PyObject_HEAD
    Task *tasks;             /* aligned to a cache line */
    Info *info;
    Py_ssize_t n, cap;
    Key *keys;               /* full keys: only once some key did not pack */
    int32_t *free_ids;       /* ids to reuse, last freed first */
    Py_ssize_t nfree, free_cap;
    Py_ssize_t num_resources;
    /* resource set r holds items[start[r] .. start[r + 1]); set r < num_resources is
     * the single resource r */
    int32_t *rset_start, *rset_items;
    Py_ssize_t nrsets, rsets_cap, nitems, items_cap;
    uint32_t *mark;          /* scratch: a set of task ids is the ids marked stamp */
    Py_ssize_t mark_cap;
    uint32_t stamp;
    /* per resource, the work of its live tasks in WORK_UNITs (each duration rounded
     * down), kept as tasks come and go: early rejection's bound (loop.c) */
    int64_t *work;
    /* checkpoints of the last run: ckpt[c * num_resources + r] is when resource r was
     * free before the task at position c * ckpt_every of its order (ckpt_order); the
     * first nckpt are valid */
    double *ckpt;            /* per checkpoint: free times, then the work done (int64) */
    Py_ssize_t ckpt_every, nckpt, ckpt_cap;
    const void *ckpt_order;
    Journal journal;
} Store;

/* an array of task ids given to a method: a list of ints or an array('i') */
typedef struct {
    int32_t *v;
    Py_ssize_t n;
    Py_buffer view;          /* view.obj set when v points into a buffer */
    int owned;
} Ids;

/* an array a method reads: a buffer of one type code */
typedef struct {
    Py_buffer view;
    const void *v;
    Py_ssize_t n;
} Arr;

/* a duration as whole WORK_UNITs, rounded down (never more than it is) */
#define WORK_UNIT 1e-12
static inline int64_t
work_of(double seconds)
{
    int64_t units = seconds > 0 ? (int64_t)(seconds * 1e12) - 1 : 0;
    return units > 0 ? units : 0;
}

/* store.c */
int vec_push(Vec *v, int32_t x);
void vec_remove(Vec *v, int32_t x);
void vec_free(Vec *v);
int check_id(Store *s, Py_ssize_t t);
int ids_get(Store *s, PyObject *obj, Ids *ids, int check);
void ids_release(Ids *ids);
int key_arg(PyObject *tuple, Key *key);
int pack_key(Task *t, const Key *key);
void unpack_key(const Task *t, Key *key);
int new_task(Store *s, const Spec *spec, const Key *key, int32_t *id);
int link_tasks(Store *s, int32_t a, int32_t b);
void add_work(Store *s, const Task *task, int sign);
int use_mark(Store *s);
static inline const int32_t *
rset_items(const Store *s, int32_t r, int32_t *count)
{
    *count = s->rset_start[r + 1] - s->rset_start[r];
    return s->rset_items + s->rset_start[r];
}
int arr_get(PyObject *obj, Arr *a, const char *what, const char *code, Py_ssize_t size);
void arrs_release(Arr *arrs, int count);
void *column(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what, const char *code,
             Py_ssize_t size, int writable);
PyObject *new_array(const char *code, const void *data, Py_ssize_t n, Py_ssize_t size);

/* build.c */
PyObject *Store_add_op(Store *s, PyObject *args);
PyObject *Store_add_edge(Store *s, PyObject *args);
PyObject *Store_add_param(Store *s, PyObject *args);
PyObject *Store_add_gather(Store *s, PyObject *args);

/* plan.c */
PyObject *plan_overlaps(PyObject *module, PyObject *args);
PyObject *plan_unrouted(PyObject *module, PyObject *args);
PyObject *plan_hops(PyObject *module, PyObject *args);

/* loop.c */
PyObject *Store_reschedule(Store *s, PyObject *args, PyObject *kw);
PyObject *Store_undo(Store *s, PyObject *args);
PyObject *Store_forget(Store *s, PyObject *unused);
PyObject *Store_earliest_ready(Store *s, PyObject *args);
void journal_free(Journal *j);

#endif
