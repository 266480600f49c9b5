/* Native chained block hashes for APC's pickle-based digests (docs/apc.md §1).
 *
 * vLLM keys block i by  h_i = H(pickle.dumps((h_{i-1}, tuple(tokens_i), extra), HIGHEST_PROTOCOL))
 * (vllm/v1/core/kv_cache_utils.py, hash_block_tokens). Python spends most of that time building
 * the tuple and the pickle. This module writes the very same pickle bytes straight into one
 * buffer and hashes them, so the keys are bit-for-bit those of the Python chain in hashing.py
 * (tests/test_apc_hashing.py checks both against pickle.dumps on every token width).
 *
 * The pickle of (parent, tokens, extra) under protocol 5, for len(parent) < 256 and more than
 * three tokens, is
 *
 *   PROTO 5 | FRAME n (8 bytes LE) | SHORT_BINBYTES len parent | MEMOIZE | MARK
 *   | one BININT1 / BININT2 / BININT per token | TUPLE | MEMOIZE | <extra> | TUPLE3 | MEMOIZE | STOP
 *
 * where n counts every byte after the frame header and <extra> is the extra keys' own pickle
 * fragment, which does not depend on the parent or the tokens (memo references carry no index
 * in protocol 4+); the caller cuts it from a real pickle.dumps (hashing.extra_fragment).
 *
 * chain(digest, parent, tokens, start, stop, block_size, fragment, suffix, keys) -> last parent
 *   digest    None for SHA-256 (OpenSSL's EVP, what hashlib.sha256 runs), else a callable
 *             bytes -> bytes (xxhash.xxh3_128_digest, ...)
 *   tokens    a list of ints or an int32 buffer (array('i')); blocks start..stop, a whole number
 *   keys      a list; digest + suffix (the group id) is appended per block
 * A token that is not an int in int32 range raises TypeError / OverflowError before any key is
 * appended, so the caller can fall back to the Python chain with nothing to undo.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>

#define PROTO 0x80
#define FRAME 0x95
#define SHORT_BINBYTES 'C'
#define MEMOIZE 0x94
#define MARK '('
#define BININT1 'K'
#define BININT2 'M'
#define BININT 'J'
#define TUPLE 't'
#define TUPLE3 0x87
#define STOP '.'
#define HEADER_LEN 11 /* PROTO 5 + FRAME + 8-byte length */
#define MAX_PARENT 255
#define MAX_BLOCK_SIZE 4096 /* keeps one pickle inside one 64 KiB frame, as pickle does */

static EVP_MD *sha256_md;  /* fetched once; a fetch per digest would double its cost */
static EVP_MD_CTX *sha256_ctx;

/* The block's tokens as int32, validated before anything is hashed. */
typedef struct {
    Py_buffer view;
    int has_view;
    int32_t *copy;
    const int32_t *ids;
} Tokens;

static int tokens_open(Tokens *t, PyObject *obj, Py_ssize_t start, Py_ssize_t stop) {
    memset(t, 0, sizeof(*t));
    if (PyList_Check(obj)) {
        if (stop > PyList_GET_SIZE(obj)) {
            PyErr_SetString(PyExc_IndexError, "token range past the end of the list");
            return -1;
        }
        t->copy = PyMem_Malloc(sizeof(int32_t) * (size_t)(stop - start + 1));
        if (t->copy == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = start; i < stop; i++) {
            PyObject *item = PyList_GET_ITEM(obj, i);
            if (!PyLong_CheckExact(item)) {  /* bool and int subclasses pickle differently */
                PyErr_SetString(PyExc_TypeError, "token ids must be ints");
                return -1;
            }
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
            if (overflow || v < INT32_MIN || v > INT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "token id outside int32");
                return -1;
            }
            t->copy[i - start] = (int32_t)v;
        }
        t->ids = t->copy;
        return 0;
    }
    if (PyObject_GetBuffer(obj, &t->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    t->has_view = 1;
    const char *fmt = t->view.format;
    if (t->view.itemsize != 4 || fmt == NULL || strcmp(fmt, "i") != 0) {
        PyErr_SetString(PyExc_TypeError, "token buffer must hold int32 ('i')");
        return -1;
    }
    if (stop > t->view.len / 4) {
        PyErr_SetString(PyExc_IndexError, "token range past the end of the buffer");
        return -1;
    }
    t->ids = (const int32_t *)t->view.buf + start;
    return 0;
}

static void tokens_close(Tokens *t) {
    if (t->has_view)
        PyBuffer_Release(&t->view);
    PyMem_Free(t->copy);
}

/* pickle's save_long for an int32: the shortest of BININT1, BININT2, BININT. */
static inline unsigned char *put_int(unsigned char *p, int32_t v) {
    if (v >= 0 && v <= 0xff) {
        *p++ = BININT1;
        *p++ = (unsigned char)v;
    } else if (v >= 0 && v <= 0xffff) {
        *p++ = BININT2;
        *p++ = (unsigned char)(v & 0xff);
        *p++ = (unsigned char)(v >> 8);
    } else {
        uint32_t u = (uint32_t)v;
        *p++ = BININT;
        for (int k = 0; k < 4; k++)
            *p++ = (unsigned char)(u >> (8 * k));
    }
    return p;
}

/* SHA-256 of buf into md (32 bytes); -1 with an exception set on failure. */
static int sha256_into(const unsigned char *buf, size_t len, unsigned char *md) {
    unsigned int md_len = 0;
    if (!EVP_DigestInit_ex(sha256_ctx, sha256_md, NULL) ||
        !EVP_DigestUpdate(sha256_ctx, buf, len) || !EVP_DigestFinal_ex(sha256_ctx, md, &md_len)) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL SHA-256 failed");
        return -1;
    }
    return (int)md_len;
}

/* `digest` of buf into md (at most MAX_PARENT bytes); its length, or -1 with an exception set. */
static int call_digest(PyObject *digest, const unsigned char *buf, size_t len, unsigned char *md) {
    PyObject *data = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
    if (data == NULL)
        return -1;
    PyObject *out = PyObject_CallOneArg(digest, data);
    Py_DECREF(data);
    if (out == NULL)
        return -1;
    if (!PyBytes_Check(out) || PyBytes_GET_SIZE(out) > MAX_PARENT) {
        Py_DECREF(out);
        /* not TypeError: the caller falls back on TypeError, and keys may be appended by now */
        PyErr_SetString(PyExc_RuntimeError, "digest must return bytes of at most 255 bytes");
        return -1;
    }
    int n = (int)PyBytes_GET_SIZE(out);
    memcpy(md, PyBytes_AS_STRING(out), (size_t)n);
    Py_DECREF(out);
    return n;
}

/* One block's pickle bytes into buf, after the parent hash; returns their length. */
static size_t write_pickle(unsigned char *buf, const unsigned char *parent, int parent_len,
                           const int32_t *ids, Py_ssize_t block_size, const char *fragment,
                           Py_ssize_t fragment_len) {
    unsigned char *p = buf + HEADER_LEN;
    *p++ = SHORT_BINBYTES;
    *p++ = (unsigned char)parent_len;
    memcpy(p, parent, (size_t)parent_len);
    p += parent_len;
    *p++ = MEMOIZE;
    *p++ = MARK;
    for (Py_ssize_t i = 0; i < block_size; i++)
        p = put_int(p, ids[i]);
    *p++ = TUPLE;
    *p++ = MEMOIZE;
    memcpy(p, fragment, (size_t)fragment_len);
    p += fragment_len;
    *p++ = TUPLE3;
    *p++ = MEMOIZE;
    *p++ = STOP;
    size_t len = (size_t)(p - buf);
    uint64_t frame = len - HEADER_LEN;
    buf[0] = PROTO;
    buf[1] = 5;
    buf[2] = FRAME;
    for (int k = 0; k < 8; k++)
        buf[3 + k] = (unsigned char)(frame >> (8 * k));
    return len;
}

static PyObject *chain(PyObject *self, PyObject *args) {
    PyObject *digest, *parent, *tokens, *fragment, *suffix, *keys;
    Py_ssize_t start, stop, block_size;
    if (!PyArg_ParseTuple(args, "OSOnnnSSO!:chain", &digest, &parent, &tokens, &start, &stop,
                          &block_size, &fragment, &suffix, &PyList_Type, &keys))
        return NULL;
    if (block_size < 4 || block_size > MAX_BLOCK_SIZE || start < 0 || stop < start ||
        (stop - start) % block_size != 0) {
        PyErr_SetString(PyExc_ValueError, "chain: need 4 <= block_size <= 4096 and whole blocks");
        return NULL;
    }
    if (digest != Py_None && !PyCallable_Check(digest)) {
        PyErr_SetString(PyExc_TypeError, "digest must be None (SHA-256) or a callable");
        return NULL;
    }
    if (PyBytes_GET_SIZE(parent) > MAX_PARENT) {
        PyErr_SetString(PyExc_ValueError, "chain: parent hash longer than 255 bytes");
        return NULL;
    }
    Tokens t;
    if (tokens_open(&t, tokens, start, stop) < 0) {
        tokens_close(&t);
        return NULL;
    }
    Py_ssize_t fragment_len = PyBytes_GET_SIZE(fragment);
    Py_ssize_t suffix_len = PyBytes_GET_SIZE(suffix);
    size_t cap = HEADER_LEN + 2 + MAX_PARENT + 2 + 5 * (size_t)block_size + 2 + fragment_len + 3;
    unsigned char *buf = PyMem_Malloc(cap);
    if (buf == NULL) {
        tokens_close(&t);
        return PyErr_NoMemory();
    }
    /* The running hash lives in md; only the map key (hash + suffix) becomes an object. */
    unsigned char md[MAX_PARENT];
    int md_len = (int)PyBytes_GET_SIZE(parent);
    memcpy(md, PyBytes_AS_STRING(parent), (size_t)md_len);
    PyObject *result = NULL;
    for (Py_ssize_t b = 0; b < (stop - start) / block_size; b++) {
        size_t len = write_pickle(buf, md, md_len, t.ids + b * block_size, block_size,
                                  PyBytes_AS_STRING(fragment), fragment_len);
        md_len = digest == Py_None ? sha256_into(buf, len, md) : call_digest(digest, buf, len, md);
        if (md_len < 0)
            goto done;
        PyObject *key = PyBytes_FromStringAndSize(NULL, md_len + suffix_len);
        if (key == NULL)
            goto done;
        memcpy(PyBytes_AS_STRING(key), md, (size_t)md_len);
        memcpy(PyBytes_AS_STRING(key) + md_len, PyBytes_AS_STRING(suffix), (size_t)suffix_len);
        int rc = PyList_Append(keys, key);
        Py_DECREF(key);
        if (rc < 0)
            goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)md, md_len);
done:
    PyMem_Free(buf);
    tokens_close(&t);
    return result;
}

static PyMethodDef methods[] = {
    {"chain", chain, METH_VARARGS,
     "chain(digest, parent, tokens, start, stop, block_size, fragment, suffix, keys) -> bytes\n"
     "Hash blocks tokens[start:stop] as vLLM's pickle-based chain; append digest+suffix per "
     "block to keys; return the last digest."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module) {
    if (sha256_md == NULL) {
        sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
        sha256_ctx = EVP_MD_CTX_new();
        if (sha256_md == NULL || sha256_ctx == NULL) {
            PyErr_SetString(PyExc_ImportError, "OpenSSL has no SHA-256");
            return -1;
        }
    }
    return PyModule_AddIntConstant(module, "MAX_BLOCK_SIZE", MAX_BLOCK_SIZE);
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, module_exec}, {0, NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_pickle_chain",
    "vLLM's pickle-based chained block hashes, written and hashed in C.", 0, methods, slots,
};

PyMODINIT_FUNC PyInit__pickle_chain(void) { return PyModuleDef_Init(&moduledef); }
