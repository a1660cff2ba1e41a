/* The C task store's type, its data and its per-task methods (see store.h). */

#include "store.h"

#include <stdlib.h>
#include <string.h>

int
vec_push(Vec *v, int32_t x)
{
    int32_t room = v->cap > VEC_INLINE ? v->cap : VEC_INLINE;
    if (v->n == room) {
        int32_t cap = 2 * room;
        int32_t *nv = malloc(cap * sizeof(int32_t));
        if (!nv) { PyErr_NoMemory(); return -1; }
        memcpy(nv, vec_items(v), v->n * sizeof(int32_t));
        if (v->cap > VEC_INLINE)
            free(v->u.heap);
        v->u.heap = nv;
        v->cap = cap;
    }
    vec_items(v)[v->n++] = x;
    return 0;
}

/* remove the first x, keeping the order (as list.remove does) */
void
vec_remove(Vec *v, int32_t x)
{
    int32_t *items = vec_items(v);
    for (int32_t i = 0; i < v->n; i++) {
        if (items[i] == x) {
            memmove(items + i, items + i + 1, (v->n - i - 1) * sizeof(int32_t));
            v->n--;
            return;
        }
    }
}

void
vec_free(Vec *v)
{
    if (v->cap > VEC_INLINE)
        free(v->u.heap);
    memset(v, 0, sizeof(*v));
}

int
check_id(Store *s, Py_ssize_t t)
{
    if (t < 0 || t >= s->n) {
        PyErr_Format(PyExc_IndexError, "task id %zd out of range", t);
        return -1;
    }
    return 0;
}

/* the writable (or readable) buffer of an array(code) with at least n items of size
 * bytes; NULL with TypeError otherwise */
void *
column(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what, const char *code,
       Py_ssize_t size, int writable)
{
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_FORMAT) < 0)
        return NULL;
    if (view->itemsize != size || !view->format || strcmp(view->format, code) != 0
            || view->len < n * size) {
        PyErr_Format(PyExc_TypeError, "%s must be an array('%s') of at least %zd items", what,
                     code, n);
        PyBuffer_Release(view);
        view->obj = NULL;
        return NULL;
    }
    return view->buf;
}

/* obj's buffer as an array of code items, into a */
int
arr_get(PyObject *obj, Arr *a, const char *what, const char *code, Py_ssize_t size)
{
    memset(a, 0, sizeof(*a));
    if (!column(obj, &a->view, 0, what, code, size, 0))
        return -1;
    a->v = a->view.buf;
    a->n = a->view.len / size;
    return 0;
}

void
arrs_release(Arr *arrs, int count)
{
    for (int i = 0; i < count; i++)
        if (arrs[i].view.obj) PyBuffer_Release(&arrs[i].view);
}

/* a new array(code) holding n items of size bytes from data */
PyObject *
new_array(const char *code, const void *data, Py_ssize_t n, Py_ssize_t size)
{
    PyObject *module = PyImport_ImportModule("array");
    if (!module)
        return NULL;
    /* y# of NULL would be None: an empty array is given b"" */
    PyObject *result = PyObject_CallMethod(module, "array", "sy#", code,
                                           n ? (const char *)data : "", n * size);
    Py_DECREF(module);
    return result;
}

/* task ids from a list of ints or an array('i'); each checked when check is set */
int
ids_get(Store *s, PyObject *obj, Ids *ids, int check)
{
    memset(ids, 0, sizeof(*ids));
    if (PyList_Check(obj)) {
        ids->n = PyList_GET_SIZE(obj);
        ids->v = malloc((ids->n ? ids->n : 1) * sizeof(int32_t));
        if (!ids->v) { PyErr_NoMemory(); return -1; }
        ids->owned = 1;
        for (Py_ssize_t i = 0; i < ids->n; i++) {
            Py_ssize_t t = PyLong_AsSsize_t(PyList_GET_ITEM(obj, i));
            if (t == -1 && PyErr_Occurred()) { ids_release(ids); return -1; }
            if (check && check_id(s, t) < 0) { ids_release(ids); return -1; }
            ids->v[i] = (int32_t)t;
        }
        return 0;
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of task ids or an array('i')");
        return -1;
    }
    if (!column(obj, &ids->view, 0, "task ids", "i", sizeof(int32_t), 0))
        return -1;
    ids->v = ids->view.buf;
    ids->n = ids->view.len / (Py_ssize_t)sizeof(int32_t);
    for (Py_ssize_t i = 0; check && i < ids->n; i++)
        if (check_id(s, ids->v[i]) < 0) { ids_release(ids); return -1; }
    return 0;
}

void
ids_release(Ids *ids)
{
    if (ids->owned)
        free(ids->v);
    if (ids->view.obj)
        PyBuffer_Release(&ids->view);
    memset(ids, 0, sizeof(*ids));
}

/* The key as two words that compare (hi, then lo) as Python compares the tuples: each
 * int v as v + KEY_FIELD + 1 in 16 bits, and 0 after the key's end, so a key that is a
 * prefix of another is less. Returns 0 when an int is out of range. */
int
pack_key(Task *t, const Key *key)
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

/* the key a packed one holds (every key of a store without wide keys packs) */
void
unpack_key(const Task *t, Key *key)
{
    key->len = 0;
    for (int i = 0; i < KEY_LEN; i++) {
        uint64_t field = (t->packed[i / 4] >> (16 * (3 - i % 4))) & 0xffff;
        if (!field)
            break;
        key->v[key->len++] = (int64_t)field - KEY_FIELD - 1;
    }
}

/* a key that did not pack: from now on every task's full key is kept */
static int
widen(Store *s)
{
    s->keys = malloc((s->cap ? s->cap : 1) * sizeof(Key));
    if (!s->keys) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t t = 0; t < s->n; t++)
        unpack_key(&s->tasks[t], &s->keys[t]);
    return 0;
}

/* grow the task arrays to cap slots; tasks stays aligned to a cache line */
static int
grow(Store *s, Py_ssize_t cap)
{
    void *nt = NULL;
    if (posix_memalign(&nt, 64, cap * sizeof(Task)) != 0)
        return PyErr_NoMemory(), -1;
    if (s->n)
        memcpy(nt, s->tasks, s->n * sizeof(Task));
    free(s->tasks);
    s->tasks = nt;
    Info *ni = realloc(s->info, cap * sizeof(Info));
    if (!ni) return PyErr_NoMemory(), -1;
    s->info = ni;
    if (s->keys) {
        Key *nk = realloc(s->keys, cap * sizeof(Key));
        if (!nk) return PyErr_NoMemory(), -1;
        s->keys = nk;
    }
    s->cap = cap;
    return 0;
}

/* trim(): give back the slots past the last task (a graph built at once has up to
 * half its slots spare after the last doubling) */
static PyObject *
Store_trim(Store *s, PyObject *unused)
{
    Py_ssize_t cap = s->n > 1024 ? s->n : 1024;
    if (cap < s->cap && grow(s, cap) < 0)
        return NULL;
    if (s->mark_cap > cap) {
        free(s->mark);
        s->mark = NULL;
        s->mark_cap = 0;
    }
    Py_RETURN_NONE;
}

/* a task as spec says with key, its id reused or new, into *id */
int
new_task(Store *s, const Spec *spec, const Key *key, int32_t *id)
{
    Task task = {.duration = spec->duration, .rset = spec->rset, .kind = spec->kind,
                 .alive = 1};
    Info info = {spec->nbytes, spec->workspace, spec->op, spec->part, spec->keeps};
    if (!pack_key(&task, key) && !s->keys && widen(s) < 0)
        return -1;
    Py_ssize_t t;
    if (s->nfree) {
        t = s->free_ids[--s->nfree];
        task.preds = s->tasks[t].preds;      /* keep the (empty) vectors' memory */
        task.succs = s->tasks[t].succs;
        task.preds.n = task.succs.n = 0;
    } else {
        if (s->n == s->cap && grow(s, s->cap ? 2 * s->cap : 1024) < 0)
            return -1;
        if (s->n >= INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a task graph holds at most 2**31 - 1 tasks");
            return -1;
        }
        t = s->n++;
    }
    s->tasks[t] = task;
    s->info[t] = info;
    add_work(s, &task, +1);
    if (s->keys)
        s->keys[t] = *key;
    *id = (int32_t)t;
    return 0;
}

/* count (sign +1) or stop counting (-1) a task's work on its resources */
void
add_work(Store *s, const Task *task, int sign)
{
    int32_t count;
    const int32_t *res = rset_items(s, task->rset, &count);
    int64_t units = work_of(task->duration);
    for (int32_t j = 0; j < count; j++)
        s->work[res[j]] += sign * units;
}

int
link_tasks(Store *s, int32_t a, int32_t b)
{
    if (vec_push(&s->tasks[a].succs, b) < 0 || vec_push(&s->tasks[b].preds, a) < 0)
        return -1;
    return 0;
}

/* a fresh stamp for the scratch marks, which cover every task id */
int
use_mark(Store *s)
{
    if (s->mark_cap < s->n) {
        free(s->mark);
        s->mark_cap = s->cap;
        s->mark = calloc(s->mark_cap ? s->mark_cap : 1, sizeof(uint32_t));
        if (!s->mark) { s->mark_cap = 0; PyErr_NoMemory(); return -1; }
        s->stamp = 0;
    }
    if (++s->stamp == 0) {   /* wrapped: start over */
        memset(s->mark, 0, s->mark_cap * sizeof(uint32_t));
        s->stamp = 1;
    }
    return 0;
}

/* -- resource sets ------------------------------------------------------------------ */

static int
push_rset(Store *s, const int32_t *items, Py_ssize_t count)
{
    if (s->nrsets + 2 > s->rsets_cap) {
        Py_ssize_t cap = s->rsets_cap ? 2 * s->rsets_cap : 64;
        while (cap < s->nrsets + 2) cap *= 2;
        int32_t *ns = realloc(s->rset_start, cap * sizeof(int32_t));
        if (!ns) return PyErr_NoMemory(), -1;
        s->rset_start = ns;
        s->rsets_cap = cap;
    }
    if (s->nitems + count > s->items_cap) {
        Py_ssize_t cap = s->items_cap ? 2 * s->items_cap : 64;
        while (cap < s->nitems + count) cap *= 2;
        int32_t *ni = realloc(s->rset_items, cap * sizeof(int32_t));
        if (!ni) return PyErr_NoMemory(), -1;
        s->rset_items = ni;
        s->items_cap = cap;
    }
    memcpy(s->rset_items + s->nitems, items, count * sizeof(int32_t));
    s->nitems += count;
    s->rset_start[++s->nrsets] = (int32_t)s->nitems;
    return (int)(s->nrsets - 1);
}

/* a tuple of resource ids, each checked, as a new resource set's id */
static int
rset_arg(Store *s, PyObject *resources)
{
    if (!PyTuple_Check(resources)) {
        PyErr_SetString(PyExc_TypeError, "resources must be a tuple of ints");
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(resources);
    int32_t *items = malloc((count ? count : 1) * sizeof(int32_t));
    if (!items) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t r = PyLong_AsSsize_t(PyTuple_GET_ITEM(resources, i));
        if (r < 0 || r >= s->num_resources) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_IndexError, "resource %zd out of range", r);
            free(items);
            return -1;
        }
        items[i] = (int32_t)r;
    }
    int r = push_rset(s, items, count);
    free(items);
    return r;
}

static PyObject *
Store_add_resource_set(Store *s, PyObject *resources)
{
    int r = rset_arg(s, resources);
    return r < 0 ? NULL : PyLong_FromLong(r);
}

static PyObject *
Store_resource_set(Store *s, PyObject *arg)
{
    Py_ssize_t r = PyLong_AsSsize_t(arg);
    if (r == -1 && PyErr_Occurred())
        return NULL;
    if (r < 0 || r >= s->nrsets)
        return PyErr_Format(PyExc_IndexError, "resource set %zd out of range", r);
    int32_t count;
    const int32_t *items = rset_items(s, (int32_t)r, &count);
    PyObject *tuple = PyTuple_New(count);
    for (int32_t i = 0; tuple && i < count; i++) {
        PyObject *x = PyLong_FromLong(items[i]);
        if (!x) { Py_CLEAR(tuple); break; }
        PyTuple_SET_ITEM(tuple, i, x);
    }
    return tuple;
}

/* -- the type ----------------------------------------------------------------------- */

static void
Store_dealloc(Store *s)
{
    for (Py_ssize_t t = 0; t < s->n; t++) {
        vec_free(&s->tasks[t].preds);
        vec_free(&s->tasks[t].succs);
    }
    free(s->tasks);
    free(s->info);
    free(s->keys);
    free(s->free_ids);
    free(s->rset_start);
    free(s->rset_items);
    free(s->mark);
    free(s->ckpt);
    free(s->work);
    journal_free(&s->journal);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int
Store_init(Store *s, PyObject *args, PyObject *kw)
{
    static char *names[] = {"num_resources", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n", names, &s->num_resources))
        return -1;
    if (s->num_resources < 0 || s->num_resources >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "num_resources out of range");
        return -1;
    }
    if (s->nrsets) {
        PyErr_SetString(PyExc_RuntimeError, "a task store is initialised once");
        return -1;
    }
    s->rsets_cap = 0;
    if (push_rset(s, NULL, 0) < 0)   /* make rset_start[0] = 0 exist */
        return -1;
    s->nrsets = 0;
    s->nitems = 0;
    s->rset_start[0] = 0;
    for (Py_ssize_t r = 0; r < s->num_resources; r++) {
        int32_t item = (int32_t)r;
        if (push_rset(s, &item, 1) < 0)
            return -1;
    }
    s->work = calloc(s->num_resources ? s->num_resources : 1, sizeof(int64_t));
    if (!s->work) { PyErr_NoMemory(); return -1; }
    return 0;
}

/* a task key from a tuple of at most KEY_LEN ints */
int
key_arg(PyObject *tuple, Key *key)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    if (n > KEY_LEN) {
        PyErr_Format(PyExc_ValueError, "a task key has at most %d ints", KEY_LEN);
        return -1;
    }
    memset(key, 0, sizeof(*key));
    key->len = (uint8_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        key->v[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (key->v[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* add(resources, duration, key) -> id: a task of no op, for tests and tools */
static PyObject *
Store_add(Store *s, PyObject *args)
{
    PyObject *resources, *key;
    double duration;
    if (!PyArg_ParseTuple(args, "O!dO!", &PyTuple_Type, &resources, &duration, &PyTuple_Type,
                          &key))
        return NULL;
    Key full;
    if (key_arg(key, &full) < 0)
        return NULL;
    int rset = rset_arg(s, resources);
    if (rset < 0)
        return NULL;
    Spec spec = {.duration = duration, .rset = rset, .op = -1, .keeps = -1};
    int32_t t;
    if (new_task(s, &spec, &full, &t) < 0)
        return NULL;
    return PyLong_FromLong(t);
}

static PyObject *
Store_link(Store *s, PyObject *args)
{
    Py_ssize_t a, b;
    if (!PyArg_ParseTuple(args, "nn", &a, &b) || check_id(s, a) < 0 || check_id(s, b) < 0)
        return NULL;
    if (link_tasks(s, (int32_t)a, (int32_t)b) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
push_free(Store *s, int32_t t)
{
    if (s->nfree == s->free_cap) {
        Py_ssize_t cap = s->free_cap ? 2 * s->free_cap : 256;
        int32_t *nf = realloc(s->free_ids, cap * sizeof(int32_t));
        if (!nf) { PyErr_NoMemory(); return -1; }
        s->free_ids = nf;
        s->free_cap = cap;
    }
    s->free_ids[s->nfree++] = t;
    return 0;
}

/* remove(tasks): unhook each task from its neighbours, forget its edges, free its id,
 * in the order given */
static PyObject *
Store_remove(Store *s, PyObject *arg)
{
    Ids ids;
    if (ids_get(s, arg, &ids, 1) < 0)
        return NULL;
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < ids.n; i++) {
        int32_t t = ids.v[i];
        Task *task = &s->tasks[t];
        if (task->alive)
            add_work(s, task, -1);
        for (int32_t j = 0; j < task->preds.n; j++)
            vec_remove(&s->tasks[vec_items(&task->preds)[j]].succs, t);
        for (int32_t j = 0; j < task->succs.n; j++)
            vec_remove(&s->tasks[vec_items(&task->succs)[j]].preds, t);
        task->preds.n = task->succs.n = 0;
        task->alive = 0;
        if (push_free(s, t) < 0) { result = NULL; break; }
    }
    ids_release(&ids);
    Py_XINCREF(result);
    return result;
}

/* detach(tasks) / attach(tasks): unhook from (hook back onto) the tasks outside the
 * set, keeping each task's own edge lists; liveness follows */
static PyObject *
hook(Store *s, PyObject *arg, int attach)
{
    Ids ids;
    if (ids_get(s, arg, &ids, 1) < 0)
        return NULL;
    if (use_mark(s) < 0) { ids_release(&ids); return NULL; }
    uint32_t *in = s->mark, stamp = s->stamp;
    for (Py_ssize_t i = 0; i < ids.n; i++)
        in[ids.v[i]] = stamp;
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < ids.n && result; i++) {
        int32_t t = ids.v[i];
        Task *task = &s->tasks[t];
        for (int32_t j = 0; j < task->preds.n && result; j++) {
            int32_t p = vec_items(&task->preds)[j];
            if (in[p] == stamp) continue;
            if (attach) { if (vec_push(&s->tasks[p].succs, t) < 0) result = NULL; }
            else vec_remove(&s->tasks[p].succs, t);
        }
        for (int32_t j = 0; j < task->succs.n && result; j++) {
            int32_t u = vec_items(&task->succs)[j];
            if (in[u] == stamp) continue;
            if (attach) { if (vec_push(&s->tasks[u].preds, t) < 0) result = NULL; }
            else vec_remove(&s->tasks[u].preds, t);
        }
        if (task->alive != (uint8_t)attach)
            add_work(s, task, attach ? +1 : -1);
        task->alive = (uint8_t)attach;
    }
    ids_release(&ids);
    Py_XINCREF(result);
    return result;
}

static PyObject *Store_detach(Store *s, PyObject *arg) { return hook(s, arg, 0); }
static PyObject *Store_attach(Store *s, PyObject *arg) { return hook(s, arg, 1); }

/* release(tasks): forget the edges of detached tasks and free their ids */
static PyObject *
Store_release(Store *s, PyObject *arg)
{
    Ids ids;
    if (ids_get(s, arg, &ids, 1) < 0)
        return NULL;
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < ids.n; i++) {
        s->tasks[ids.v[i]].preds.n = s->tasks[ids.v[i]].succs.n = 0;
        if (push_free(s, ids.v[i]) < 0) { result = NULL; break; }
    }
    ids_release(&ids);
    Py_XINCREF(result);
    return result;
}

static PyObject *
vec_list(Vec *v)
{
    PyObject *list = PyList_New(v->n);
    for (int32_t i = 0; list && i < v->n; i++) {
        PyObject *x = PyLong_FromLong(vec_items(v)[i]);
        if (!x) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

static Py_ssize_t
id_arg(Store *s, PyObject *v)
{
    Py_ssize_t t = PyLong_AsSsize_t(v);
    if (t == -1 && PyErr_Occurred())
        return -1;
    return check_id(s, t) < 0 ? -1 : t;
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
    return t < 0 ? NULL : PyBool_FromLong(s->tasks[t].alive);
}

static PyObject *
Store_duration(Store *s, PyObject *arg)
{
    Py_ssize_t t = id_arg(s, arg);
    return t < 0 ? NULL : PyFloat_FromDouble(s->tasks[t].duration);
}

static PyObject *
key_tuple(Store *s, int32_t t)
{
    Key key;
    if (s->keys) key = s->keys[t];
    else unpack_key(&s->tasks[t], &key);
    PyObject *tuple = PyTuple_New(key.len);
    for (int i = 0; tuple && i < key.len; i++) {
        PyObject *x = PyLong_FromLongLong(key.v[i]);
        if (!x) { Py_CLEAR(tuple); break; }
        PyTuple_SET_ITEM(tuple, i, x);
    }
    return tuple;
}

/* keys(tasks) -> list of the tasks' keys */
static PyObject *
Store_keys(Store *s, PyObject *arg)
{
    Ids ids;
    if (ids_get(s, arg, &ids, 1) < 0)
        return NULL;
    PyObject *list = PyList_New(ids.n);
    for (Py_ssize_t i = 0; list && i < ids.n; i++) {
        PyObject *key = key_tuple(s, ids.v[i]);
        if (!key) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, i, key);
    }
    ids_release(&ids);
    return list;
}

/* info(t) -> (kind, op, part, resource set, nbytes, workspace, keeps) */
static PyObject *
Store_info(Store *s, PyObject *arg)
{
    Py_ssize_t t = id_arg(s, arg);
    if (t < 0)
        return NULL;
    const Task *task = &s->tasks[t];
    const Info *info = &s->info[t];
    return Py_BuildValue("iiiiLLi", task->kind, info->op, info->part, task->rset,
                         (long long)info->nbytes, (long long)info->workspace, info->keeps);
}

static PyObject *
Store_live_ids(Store *s, PyObject *unused)
{
    int32_t *ids = malloc((s->n ? s->n : 1) * sizeof(int32_t));
    if (!ids) return PyErr_NoMemory();
    Py_ssize_t count = 0;
    for (Py_ssize_t t = 0; t < s->n; t++)
        if (s->tasks[t].alive) ids[count++] = (int32_t)t;
    PyObject *result = new_array("i", ids, count, sizeof(int32_t));
    free(ids);
    return result;
}

/* columns() -> (ids, kind, op, part, rset, nbytes, keys) of the live tasks, ascending by
 * id; keys: an array('Q') of the packed keys, two words a task, or (some key did not
 * pack) a list of key tuples */
static PyObject *
Store_columns(Store *s, PyObject *unused)
{
    Py_ssize_t n = s->n ? s->n : 1, count = 0;
    int32_t *ids = malloc(n * sizeof(int32_t)), *op = malloc(n * sizeof(int32_t));
    int32_t *part = malloc(n * sizeof(int32_t)), *rset = malloc(n * sizeof(int32_t));
    uint8_t *kind = malloc(n);
    int64_t *nbytes = malloc(n * sizeof(int64_t));
    uint64_t *packed = malloc(2 * n * sizeof(uint64_t));
    PyObject *result = NULL, *cols[7] = {NULL};
    if (!ids || !op || !part || !rset || !kind || !nbytes || !packed) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t t = 0; t < s->n; t++) {
        const Task *task = &s->tasks[t];
        if (!task->alive) continue;
        ids[count] = (int32_t)t;
        kind[count] = task->kind;
        op[count] = s->info[t].op;
        part[count] = s->info[t].part;
        rset[count] = task->rset;
        packed[2 * count] = task->packed[0];
        packed[2 * count + 1] = task->packed[1];
        nbytes[count++] = s->info[t].nbytes;
    }
    cols[0] = new_array("i", ids, count, 4);
    cols[1] = new_array("B", kind, count, 1);
    cols[2] = new_array("i", op, count, 4);
    cols[3] = new_array("i", part, count, 4);
    cols[4] = new_array("i", rset, count, 4);
    cols[5] = new_array("q", nbytes, count, 8);
    if (!s->keys)
        cols[6] = new_array("Q", packed, 2 * count, 8);
    else if (cols[0])
        cols[6] = Store_keys(s, cols[0]);
    int ok = 1;
    for (int i = 0; i < 7; i++)
        ok = ok && cols[i];
    if (ok)
        result = PyTuple_Pack(7, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6]);
    for (int i = 0; i < 7; i++)
        Py_XDECREF(cols[i]);
done:
    free(ids); free(op); free(part); free(rset); free(kind); free(nbytes); free(packed);
    return result;
}

/* resource_sets() -> every resource set, by id */
static PyObject *
Store_resource_sets(Store *s, PyObject *unused)
{
    PyObject *list = PyList_New(s->nrsets);
    for (Py_ssize_t r = 0; list && r < s->nrsets; r++) {
        PyObject *id = PyLong_FromSsize_t(r);
        PyObject *items = id ? Store_resource_set(s, id) : NULL;
        Py_XDECREF(id);
        if (!items) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, r, items);
    }
    return list;
}

static int
cmp_pair(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    if (x[1] != y[1]) return x[1] < y[1] ? -1 : 1;
    return 0;
}

/* account(tasks, sign, activations) -> [(device, workspace, count), ...]: adds sign x
 * the bytes each task keeps to activations[its device] (an array('q')), and returns
 * how many of the tasks that keep bytes on a device have each workspace there */
static PyObject *
Store_account(Store *s, PyObject *args)
{
    PyObject *tasks, *acts_o;
    int sign;
    if (!PyArg_ParseTuple(args, "OiO", &tasks, &sign, &acts_o))
        return NULL;
    Ids ids;
    if (ids_get(s, tasks, &ids, 1) < 0)
        return NULL;
    Py_buffer view = {0};
    int64_t *acts = column(acts_o, &view, 0, "activations", "q", sizeof(int64_t), 1);
    Py_ssize_t ndev = acts ? view.len / (Py_ssize_t)sizeof(int64_t) : 0, npairs = 0;
    int64_t *pairs = acts ? malloc((ids.n ? ids.n : 1) * 2 * sizeof(int64_t)) : NULL;
    PyObject *result = NULL;
    if (acts && !pairs)
        PyErr_NoMemory();
    if (!pairs)
        goto done;
    for (Py_ssize_t i = 0; i < ids.n; i++) {
        const Info *task = &s->info[ids.v[i]];
        int32_t d = task->keeps;
        if (d < 0) continue;
        if (d >= ndev) {
            PyErr_Format(PyExc_IndexError, "device %d out of range of activations", (int)d);
            goto done;
        }
        acts[d] += sign * task->nbytes;
        if (task->workspace) {
            pairs[2 * npairs] = d;
            pairs[2 * npairs++ + 1] = task->workspace;
        }
    }
    qsort(pairs, npairs, 2 * sizeof(int64_t), cmp_pair);
    result = PyList_New(0);
    for (Py_ssize_t i = 0; result && i < npairs;) {
        Py_ssize_t j = i;
        while (j < npairs && !cmp_pair(&pairs[2 * i], &pairs[2 * j])) j++;
        PyObject *row = Py_BuildValue("LLn", (long long)pairs[2 * i],
                                      (long long)pairs[2 * i + 1], sign * (j - i));
        if (!row || PyList_Append(result, row) < 0) Py_CLEAR(result);
        Py_XDECREF(row);
        i = j;
    }
done:
    free(pairs);
    if (view.obj) PyBuffer_Release(&view);
    ids_release(&ids);
    return result;
}

/* resource_usage(start, end, num_devices) -> (busy, moved): per resource, the time its
 * live tasks hold it and the bytes transfers and syncs move over it; a device's busy
 * time is its compute (on host-driven clusters its communication holds it too) */
static PyObject *
Store_resource_usage(Store *s, PyObject *args)
{
    PyObject *start_o, *end_o;
    Py_ssize_t num_devices;
    if (!PyArg_ParseTuple(args, "OOn", &start_o, &end_o, &num_devices))
        return NULL;
    Py_buffer vs = {0}, ve = {0};
    const double *start = column(start_o, &vs, s->n, "start", "d", sizeof(double), 0);
    const double *end = start ? column(end_o, &ve, s->n, "end", "d", sizeof(double), 0) : NULL;
    Py_ssize_t nr = s->num_resources ? s->num_resources : 1;
    double *busy = calloc(nr, sizeof(double));
    int64_t *moved = calloc(nr, sizeof(int64_t));
    PyObject *result = NULL;
    if (!end)
        goto done;
    if (!busy || !moved) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t t = 0; t < s->n; t++) {
        const Task *task = &s->tasks[t];
        if (!task->alive) continue;
        int moving = task->kind == K_TRANSFER || task->kind == K_SYNC || task->kind == K_GATHER;
        int32_t count;
        const int32_t *res = rset_items(s, task->rset, &count);
        for (int32_t j = 0; j < count; j++) {
            int32_t r = res[j];
            if (moving) {
                moved[r] += s->info[t].nbytes;
                if (r < num_devices) continue;
            }
            busy[r] += end[t] - start[t];
        }
    }
    PyObject *b = new_array("d", busy, s->num_resources, sizeof(double));
    PyObject *m = b ? new_array("q", moved, s->num_resources, sizeof(int64_t)) : NULL;
    if (m)
        result = PyTuple_Pack(2, b, m);
    Py_XDECREF(b);
    Py_XDECREF(m);
done:
    free(busy);
    free(moved);
    if (ve.obj) PyBuffer_Release(&ve);
    if (vs.obj) PyBuffer_Release(&vs);
    return result;
}

/* memory_bytes() -> the bytes the store holds: tasks, edges, keys, resource sets,
 * scratch, checkpoints and journal */
static PyObject *
Store_memory_bytes(Store *s, PyObject *unused)
{
    size_t total = s->cap * (sizeof(Task) + sizeof(Info) + (s->keys ? sizeof(Key) : 0));
    for (Py_ssize_t t = 0; t < s->n; t++) {
        const Task *task = &s->tasks[t];
        if (task->preds.cap > VEC_INLINE) total += task->preds.cap * sizeof(int32_t);
        if (task->succs.cap > VEC_INLINE) total += task->succs.cap * sizeof(int32_t);
    }
    total += s->free_cap * sizeof(int32_t) + s->rsets_cap * sizeof(int32_t)
             + s->items_cap * sizeof(int32_t) + s->mark_cap * sizeof(uint32_t)
             + s->ckpt_cap * sizeof(double) + s->journal.cap * sizeof(Saved)
             + s->num_resources * sizeof(int64_t)
             + s->journal.order_cap * sizeof(int32_t);
    return PyLong_FromSize_t(total);
}

static Py_ssize_t
Store_len(Store *s)
{
    return s->n;
}

static PyMethodDef Store_methods[] = {
    {"add_resource_set", (PyCFunction)Store_add_resource_set, METH_O,
     "add_resource_set(resources) -> id of a new resource set"},
    {"resource_set", (PyCFunction)Store_resource_set, METH_O, "resource_set(r) -> resources"},
    {"add", (PyCFunction)Store_add, METH_VARARGS, "add(resources, duration, key) -> task id"},
    {"link", (PyCFunction)Store_link, METH_VARARGS, "link(a, b): b depends on a"},
    {"remove", (PyCFunction)Store_remove, METH_O, "remove(tasks): delete tasks and edges"},
    {"detach", (PyCFunction)Store_detach, METH_O, "detach(tasks): unhook, keeping own edges"},
    {"attach", (PyCFunction)Store_attach, METH_O, "attach(tasks): undo detach"},
    {"release", (PyCFunction)Store_release, METH_O, "release(tasks): free detached tasks"},
    {"preds", (PyCFunction)Store_preds, METH_O, "preds(t) -> list of task ids"},
    {"succs", (PyCFunction)Store_succs, METH_O, "succs(t) -> list of task ids"},
    {"alive", (PyCFunction)Store_alive, METH_O, "alive(t) -> bool"},
    {"duration_of", (PyCFunction)Store_duration, METH_O, "duration_of(t) -> seconds"},
    {"keys", (PyCFunction)Store_keys, METH_O, "keys(tasks) -> list of key tuples"},
    {"info", (PyCFunction)Store_info, METH_O,
     "info(t) -> (kind, op, part, resource set, nbytes, workspace, keeps)"},
    {"live_ids", (PyCFunction)Store_live_ids, METH_NOARGS, "live task ids, ascending"},
    {"trim", (PyCFunction)Store_trim, METH_NOARGS, "trim(): free the spare task slots"},
    {"memory_bytes", (PyCFunction)Store_memory_bytes, METH_NOARGS,
     "memory_bytes() -> bytes the store holds"},
    {"columns", (PyCFunction)Store_columns, METH_NOARGS,
     "columns() -> (ids, kind, op, part, rset, nbytes, keys) of the live tasks"},
    {"resource_sets", (PyCFunction)Store_resource_sets, METH_NOARGS,
     "resource_sets() -> every resource set, by id"},
    {"account", (PyCFunction)Store_account, METH_VARARGS,
     "account(tasks, sign, activations) -> [(device, workspace, count)]"},
    {"resource_usage", (PyCFunction)Store_resource_usage, METH_VARARGS,
     "resource_usage(start, end, num_devices) -> (busy, moved)"},
    {"add_op", (PyCFunction)Store_add_op, METH_VARARGS,
     "add_op(op, devices, forward, backward, kept, workspace) -> (forward ids, backward ids)"},
    {"add_edge", (PyCFunction)Store_add_edge, METH_VARARGS,
     "add_edge(producer, consumer, pfwd, cfwd, pbwd, cbwd, plan...) -> transfer ids"},
    {"add_param", (PyCFunction)Store_add_param, METH_VARARGS,
     "add_param(order, producers, plan...) -> sync and update ids"},
    {"add_gather", (PyCFunction)Store_add_gather, METH_VARARGS,
     "add_gather(op, part, rset, duration, nbytes, key, preds, succs) -> id"},
    {"earliest_ready", (PyCFunction)Store_earliest_ready, METH_VARARGS,
     "earliest_ready(ready, end, added, removed) -> t0"},
    {"reschedule", (PyCFunction)Store_reschedule, METH_VARARGS | METH_KEYWORDS,
     "reschedule(ready, start, end, order, t0, changed, removed[, limit[, deadline[, "
     "journal]]]) -> makespan"},
    {"undo", (PyCFunction)Store_undo, METH_VARARGS,
     "undo(ready, start, end, order): restore what the journaled reschedule wrote"},
    {"forget", (PyCFunction)Store_forget, METH_NOARGS, "forget(): drop the journal"},
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
    .tp_doc = "A task graph in C arrays (see flextui.sim.pystore, its pure-Python twin).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Store_init,
    .tp_dealloc = (destructor)Store_dealloc,
    .tp_methods = Store_methods,
    .tp_as_sequence = &Store_as_sequence,
};

static PyMethodDef module_methods[] = {
    {"overlaps", plan_overlaps, METH_VARARGS,
     "overlaps(producer, consumer, rank, width) -> (k, m, nbytes)"},
    {"unrouted", plan_unrouted, METH_VARARGS,
     "unrouted(k, m, pdev, cdev, route_at, devices, reverse) -> pair codes"},
    {"hops", plan_hops, METH_VARARGS,
     "hops(k, m, nbytes, pdev, cdev, route_at, route_links, devices, reverse, hop_rset, "
     "latency, bandwidth) -> (offsets, rsets, durations)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ctaskstore", "A task graph and its event loop in C.", -1,
    module_methods,
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
