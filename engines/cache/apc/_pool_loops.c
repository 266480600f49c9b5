/* APC's block-pool hot loops in C, over a C twin of KVCacheBlock (docs/apc.md §2.5).
 *
 * engines/cache/apc/pool_loops.py holds the reference: the Python KVCacheBlock (block.py) and the
 * five loops in Python. This module provides the same six names with the same contracts, so
 * BlockPool runs either set unchanged, and tests/test_apc_pool_loops.py drives both through the
 * same operations and compares every block, link, count and map entry after each.
 *
 * The block is a C struct behind the same attributes (block_id, ref_cnt, block_hash,
 * prev_free_block, next_free_block, is_null, provenance): the loops read and write its fields
 * directly instead of through attribute lookups. A None attribute is stored as NULL; links and
 * hashes are strong references, so the type takes part in cyclic GC (the queue is a cycle).
 *
 *   pop_free(head, n, entries, pop_duplicate) -> (blocks, num_evicted)
 *   link_free(head, tail, blocks, prepend_hashless) -> (num_freed, num_hashed)
 *   cache_run(keys, blocks, start, stop, entries, add_duplicate) -> None
 *   take_free(blocks) -> (num_removed, num_hashed)
 *   hit_run(keys, max_blocks, entries) -> blocks
 *
 * `entries` is the BlockHashToBlockMap's dict (key -> block, or {block_id: block} for
 * duplicates); the rare duplicate cases call back into the map's Python methods.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct Block {
    PyObject_HEAD
    Py_ssize_t block_id;
    Py_ssize_t ref_cnt;
    PyObject *block_hash; /* NULL: None */
    struct Block *prev;   /* NULL: None */
    struct Block *next;   /* NULL: None */
    PyObject *provenance; /* NULL: None */
    char is_null;
} Block;

static PyTypeObject BlockType;

#define IS_BLOCK(o) Py_IS_TYPE((o), &BlockType)
#define AS_OBJ(b) ((PyObject *)(b))

/* Point *slot at v (NULL allowed), taking a new reference and dropping the old one. */
static inline void set_ref(PyObject **slot, PyObject *v) {
    Py_XINCREF(v);
    Py_XSETREF(*slot, v);
}
#define SET_LINK(field, v) set_ref((PyObject **)&(field), AS_OBJ(v))

/* ---- the block type ----------------------------------------------------------------------- */

static PyObject *block_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"block_id", NULL};
    Py_ssize_t block_id;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n:KVCacheBlock", kwlist, &block_id))
        return NULL;
    Block *self = (Block *)type->tp_alloc(type, 0); /* zeroed: every link and hash None */
    if (self != NULL)
        self->block_id = block_id;
    return AS_OBJ(self);
}

static int block_traverse(Block *self, visitproc visit, void *arg) {
    Py_VISIT(self->block_hash);
    Py_VISIT(self->prev);
    Py_VISIT(self->next);
    Py_VISIT(self->provenance);
    return 0;
}

static int block_clear(Block *self) {
    Py_CLEAR(self->block_hash);
    Py_CLEAR(self->prev);
    Py_CLEAR(self->next);
    Py_CLEAR(self->provenance);
    return 0;
}

static void block_dealloc(Block *self) {
    PyObject_GC_UnTrack(self);
    block_clear(self);
    Py_TYPE(self)->tp_free(AS_OBJ(self));
}

static PyObject *block_repr(Block *self) {
    return PyUnicode_FromFormat("KVCacheBlock(id=%zd, ref=%zd, hashed=%s)", self->block_id,
                                self->ref_cnt, self->block_hash ? "True" : "False");
}

static PyObject *none_or(PyObject *v) {
    return Py_NewRef(v ? v : Py_None);
}

static PyObject *get_object(Block *self, void *offset) {
    return none_or(*(PyObject **)((char *)self + (Py_ssize_t)offset));
}

static int set_object(Block *self, PyObject *value, void *offset) {
    set_ref((PyObject **)((char *)self + (Py_ssize_t)offset), value == Py_None ? NULL : value);
    return 0;
}

static int set_link(Block *self, PyObject *value, void *offset) {
    if (value != NULL && value != Py_None && !IS_BLOCK(value)) {
        PyErr_Format(PyExc_TypeError, "a free-queue link must be a native KVCacheBlock or None, not %s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    return set_object(self, value, offset);
}

#define OFFSET(field) ((void *)offsetof(Block, field))

static PyGetSetDef block_getset[] = {
    {"block_hash", (getter)get_object, (setter)set_object, "map key, None when not cached",
     OFFSET(block_hash)},
    {"prev_free_block", (getter)get_object, (setter)set_link, NULL, OFFSET(prev)},
    {"next_free_block", (getter)get_object, (setter)set_link, NULL, OFFSET(next)},
    {"provenance", (getter)get_object, (setter)set_object, "verify_tokens_on_hit only",
     OFFSET(provenance)},
    {NULL},
};

static PyMemberDef block_members[] = {
    {"block_id", T_PYSSIZET, offsetof(Block, block_id), READONLY, NULL},
    {"ref_cnt", T_PYSSIZET, offsetof(Block, ref_cnt), 0, NULL},
    {"is_null", T_BOOL, offsetof(Block, is_null), 0, NULL},
    {NULL},
};

static PyObject *block_reset_hash(Block *self, PyObject *unused) {
    Py_CLEAR(self->block_hash);
    Py_CLEAR(self->provenance);
    Py_RETURN_NONE;
}

/* copy.deepcopy and pickle: rebuilt from the id, then every other field from the state. */
static PyObject *block_reduce(Block *self, PyObject *unused) {
    return Py_BuildValue("O(n)(nNNNNN)", Py_TYPE(self), self->block_id, self->ref_cnt,
                         none_or(self->block_hash), none_or(AS_OBJ(self->prev)),
                         none_or(AS_OBJ(self->next)), PyBool_FromLong(self->is_null),
                         none_or(self->provenance));
}

static PyObject *block_setstate(Block *self, PyObject *state) {
    Py_ssize_t ref_cnt;
    PyObject *hash, *prev, *next, *is_null, *provenance;
    if (!PyArg_ParseTuple(state, "nOOOOO:__setstate__", &ref_cnt, &hash, &prev, &next, &is_null,
                          &provenance))
        return NULL;
    if (set_link(self, prev, OFFSET(prev)) < 0 || set_link(self, next, OFFSET(next)) < 0)
        return NULL;
    int flag = PyObject_IsTrue(is_null);
    if (flag < 0)
        return NULL;
    self->ref_cnt = ref_cnt;
    self->is_null = (char)flag;
    set_object(self, hash, OFFSET(block_hash));
    set_object(self, provenance, OFFSET(provenance));
    Py_RETURN_NONE;
}

static PyMethodDef block_methods[] = {
    {"reset_hash", (PyCFunction)block_reset_hash, METH_NOARGS, "Clear the hash and provenance."},
    {"__reduce__", (PyCFunction)block_reduce, METH_NOARGS, NULL},
    {"__setstate__", (PyCFunction)block_setstate, METH_O, NULL},
    {NULL},
};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "engines.cache.apc._pool_loops.KVCacheBlock",
    .tp_doc = "One physical KV page (the C twin of engines.cache.apc.block.KVCacheBlock).",
    .tp_basicsize = sizeof(Block),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = block_new,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_traverse = (traverseproc)block_traverse,
    .tp_clear = (inquiry)block_clear,
    .tp_repr = (reprfunc)block_repr,
    .tp_members = block_members,
    .tp_getset = block_getset,
    .tp_methods = block_methods,
};

/* ---- the loops ------------------------------------------------------------------------------ */

static int not_block(PyObject *o, const char *where) {
    if (IS_BLOCK(o))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s: expected a native KVCacheBlock, got %s", where,
                 Py_TYPE(o)->tp_name);
    return 1;
}

/* Drop blk's map entry (it is being evicted); the duplicates' dict goes through the map. */
static int evict(Block *blk, PyObject *entries, PyObject *pop_duplicate) {
    PyObject *key = blk->block_hash;
    PyObject *entry = PyDict_GetItemWithError(entries, key);
    if (entry == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    if (entry == AS_OBJ(blk)) {
        if (PyDict_DelItem(entries, key) < 0)
            return -1;
    } else {
        PyObject *r = PyObject_CallFunction(pop_duplicate, "On", key, blk->block_id);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    Py_CLEAR(blk->block_hash);
    return 0;
}

static PyObject *pop_free(PyObject *mod, PyObject *args) {
    Block *head;
    Py_ssize_t n, num_evicted = 0;
    PyObject *entries, *pop_duplicate;
    if (!PyArg_ParseTuple(args, "O!nO!O:pop_free", &BlockType, &head, &n, &PyDict_Type, &entries,
                          &pop_duplicate))
        return NULL;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    Block *blk = head->next; /* owned from here on: head's reference moves to this local */
    head->next = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (blk == NULL || blk->next == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "pop_free: the free queue is shorter than asked");
            goto fail;
        }
        if (blk->block_hash != NULL) {
            if (evict(blk, entries, pop_duplicate) < 0)
                goto fail;
            num_evicted++;
        }
        blk->ref_cnt = 1;
        Py_CLEAR(blk->prev);
        Block *next = blk->next; /* its reference moves to the local too */
        blk->next = NULL;
        PyList_SET_ITEM(out, i, AS_OBJ(blk)); /* steals the local's reference */
        blk = next;
    }
    head->next = blk;
    SET_LINK(blk->prev, head);
    return Py_BuildValue("Nn", out, num_evicted);
fail: /* the queue resumes at blk; the blocks popped so far are out of it */
    head->next = blk;
    if (blk != NULL)
        SET_LINK(blk->prev, head);
    Py_DECREF(out);
    return NULL;
}

/* Link `blocks` in order between `left` and its current successor. */
static void splice_after(Block *left, PyObject **blocks, Py_ssize_t n) {
    Block *right = left->next; /* owned by the local while the links change */
    left->next = NULL;
    Block *prev = left;
    for (Py_ssize_t i = 0; i < n; i++) {
        Block *blk = (Block *)blocks[i];
        SET_LINK(prev->next, blk);
        SET_LINK(blk->prev, prev);
        prev = blk;
    }
    Py_XSETREF(prev->next, right);
    SET_LINK(right->prev, prev);
}

static PyObject *link_free(PyObject *mod, PyObject *args) {
    Block *head, *tail;
    PyObject *blocks;
    int prepend_hashless;
    if (!PyArg_ParseTuple(args, "O!O!Op:link_free", &BlockType, &head, &BlockType, &tail, &blocks,
                          &prepend_hashless))
        return NULL;
    PyObject *seq = PySequence_Fast(blocks, "link_free: blocks must be iterable");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), num_tail = 0, num_head = 0, num_hashed = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++)
        if (not_block(items[i], "link_free")) {
            Py_DECREF(seq);
            return NULL;
        }
    PyObject **to_head = prepend_hashless ? PyMem_Malloc((n ? n : 1) * sizeof(PyObject *)) : NULL;
    if (prepend_hashless && to_head == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    Block *prev = tail->prev; /* tail keeps it alive */
    for (Py_ssize_t i = 0; i < n; i++) {
        Block *blk = (Block *)items[i];
        /* The null block's ref_cnt is not maintained: it goes negative, never back to 0. */
        if (--blk->ref_cnt)
            continue;
        if (blk->block_hash != NULL)
            num_hashed++;
        else if (prepend_hashless) {
            to_head[num_head++] = AS_OBJ(blk);
            continue;
        }
        SET_LINK(prev->next, blk);
        SET_LINK(blk->prev, prev);
        prev = blk;
        num_tail++;
    }
    SET_LINK(prev->next, tail);
    SET_LINK(tail->prev, prev);
    if (num_head)
        splice_after(head, to_head, num_head);
    PyMem_Free(to_head);
    Py_DECREF(seq);
    return Py_BuildValue("nn", num_tail + num_head, num_hashed);
}

static PyObject *cache_run(PyObject *mod, PyObject *args) {
    PyObject *keys, *blocks, *entries, *add_duplicate;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "O!O!nnO!O:cache_run", &PyList_Type, &keys, &PyList_Type, &blocks,
                          &start, &stop, &PyDict_Type, &entries, &add_duplicate))
        return NULL;
    if (start < 0 || stop > PyList_GET_SIZE(blocks) || stop > PyList_GET_SIZE(keys)) {
        PyErr_SetString(PyExc_IndexError, "cache_run: start:stop outside the keys or the blocks");
        return NULL;
    }
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *blk = PyList_GET_ITEM(blocks, i), *key = PyList_GET_ITEM(keys, i);
        if (not_block(blk, "cache_run"))
            return NULL;
        set_ref(&((Block *)blk)->block_hash, key);
        PyObject *entry = PyDict_SetDefault(entries, key, blk);
        if (entry == NULL)
            return NULL;
        if (entry != blk) { /* same content cached already: keep both, the first one wins */
            Py_INCREF(entry);
            PyObject *r = PyObject_CallFunctionObjArgs(add_duplicate, key, entry, blk, NULL);
            Py_DECREF(entry);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *take_free(PyObject *mod, PyObject *blocks) {
    PyObject *seq = PySequence_Fast(blocks, "take_free: blocks must be iterable");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), num_removed = 0, num_hashed = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++)
        if (not_block(items[i], "take_free"))
            goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        Block *blk = (Block *)items[i];
        if (blk->is_null)
            continue;
        if (blk->ref_cnt == 0) {
            Block *prev = blk->prev, *next = blk->next;
            if (prev == NULL || next == NULL) {
                PyErr_Format(PyExc_RuntimeError, "touch: block %zd has ref 0 but is not free",
                             blk->block_id);
                goto fail;
            }
            /* prev and next stay alive through their other neighbours' links */
            SET_LINK(prev->next, next);
            SET_LINK(next->prev, prev);
            Py_CLEAR(blk->prev);
            Py_CLEAR(blk->next);
            num_removed++;
            num_hashed += blk->block_hash != NULL;
        }
        blk->ref_cnt++;
    }
    Py_DECREF(seq);
    return Py_BuildValue("nn", num_removed, num_hashed);
fail:
    Py_DECREF(seq);
    return NULL;
}

static PyObject *hit_run(PyObject *mod, PyObject *args) {
    PyObject *keys, *entries;
    Py_ssize_t max_blocks;
    if (!PyArg_ParseTuple(args, "O!nO!:hit_run", &PyList_Type, &keys, &max_blocks, &PyDict_Type,
                          &entries))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t n = Py_MIN(max_blocks, PyList_GET_SIZE(keys));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyDict_GetItemWithError(entries, PyList_GET_ITEM(keys, i));
        if (entry == NULL) {
            if (PyErr_Occurred())
                goto fail;
            break;
        }
        if (PyDict_Check(entry)) { /* duplicates: the first inserted block answers */
            Py_ssize_t pos = 0;
            PyObject *id, *first = NULL;
            PyDict_Next(entry, &pos, &id, &first);
            entry = first;
        }
        if (entry == NULL || PyList_Append(out, entry) < 0)
            goto fail;
    }
    return out;
fail:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "hit_run: an empty duplicates entry in the map");
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"pop_free", pop_free, METH_VARARGS,
     "pop_free(head, n, entries, pop_duplicate) -> (blocks, num_evicted)\n"
     "Take the first n free blocks, evicting cached ones from the map; each gets ref_cnt 1."},
    {"link_free", link_free, METH_VARARGS,
     "link_free(head, tail, blocks, prepend_hashless) -> (num_freed, num_hashed)\n"
     "Drop one reference each; blocks reaching 0 join the queue's tail, or, hashless with "
     "prepend_hashless, its head, in order."},
    {"cache_run", cache_run, METH_VARARGS,
     "cache_run(keys, blocks, start, stop, entries, add_duplicate) -> None\n"
     "Give blocks[start:stop] their keys and insert them into the map."},
    {"take_free", take_free, METH_O,
     "take_free(blocks) -> (num_removed, num_hashed)\n"
     "Take a reference on each block; free ones leave the queue; the null block is skipped."},
    {"hit_run", hit_run, METH_VARARGS,
     "hit_run(keys, max_blocks, entries) -> blocks\n"
     "The blocks cached under the leading keys, up to the first miss or max_blocks."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *mod) {
    if (PyType_Ready(&BlockType) < 0)
        return -1;
    return PyModule_AddObjectRef(mod, "KVCacheBlock", AS_OBJ(&BlockType));
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, module_exec}, {0, NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_pool_loops",
    "APC's block-pool hot loops over a C KVCacheBlock (pool_loops.py is the reference).", 0,
    methods, slots,
};

PyMODINIT_FUNC PyInit__pool_loops(void) { return PyModuleDef_Init(&moduledef); }
