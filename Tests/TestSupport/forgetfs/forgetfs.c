/*
 * forgetfs: a FUSE file system for the tests that forgets, at a "power cut",
 * everything that was never made durable — by strict POSIX rules, as btrfs
 * gives them (issue 41).
 *
 *   forgetfs BACKING MOUNTPOINT
 *
 * The names and attributes live in memory; each regular file's bytes live in
 * BACKING/blobs/INO. What is durable is tracked beside it:
 *
 *   - A regular file's bytes and size: as of its last fsync or fdatasync (or
 *     a syncfs). O_TRUNC, ftruncate and fallocate change the size, which is
 *     data: durable at the next fsync/fdatasync. A file never synced is empty.
 *   - A directory's entries (create, mknod, mkdir, symlink, link, unlink,
 *     rmdir, rename in or out): as of the last fsync of that directory (or a
 *     syncfs). That fsync also makes durable the attributes (mode, owner,
 *     times) of every inode it names, never their bytes. A rename between two
 *     directories is an entry removed from one and an entry added to the
 *     other, each durable when its own directory is synced: with only the
 *     target synced the file has both names after a cut; with only the source
 *     synced, neither. A rename is whole only once both are synced.
 *   - An inode's attributes (mode, owner, times): as of its last fsync (not
 *     fdatasync), a sync of a directory naming it, or a syncfs.
 *   - syncfs(2) never reaches a FUSE daemon (the kernel sends FUSE_SYNCFS to
 *     virtiofs only). The ioctl FORGETFS_IOC_SYNCFS on any descriptor of the
 *     mount stands for it: it makes everything durable. libforgetfs-syncfs.so
 *     (LD_PRELOAD) sends it after every real syncfs(2) of a process.
 *   - The ioctl FORGETFS_IOC_CUT is the power cut: the durable state is written
 *     to BACKING (BACKING/manifest and the blobs), everything else dropped,
 *     and the daemon unmounts and exits. Mounting BACKING again is the boot
 *     after the cut: all it holds is durable. Inode numbers (and the st_ino a
 *     program saw) survive a cut, as on a disk.
 *   - A clean unmount (fusermount3 -u, SIGTERM) is a clean shutdown: all is kept.
 *
 * Locks (flock, fcntl) are the kernel's own: this daemon implements neither,
 * so FUSE keeps them local, as on any local file system. mmap works (no
 * direct_io): SQLite's WAL index is an mmapped -shm file. inotify sees what
 * is done through the mount. renameat2's RENAME_NOREPLACE is supported,
 * RENAME_EXCHANGE is refused (EINVAL).
 *
 * One thread serves every request: no lock is needed, and none blocks.
 */
#define FUSE_USE_VERSION 35
#define _GNU_SOURCE
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define FORGETFS_IOC_SYNCFS _IO(0xF7, 0x41)
#define FORGETFS_IOC_CUT _IO(0xF7, 0x42)

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static const double cache_seconds = 1.0;

typedef struct {
    char *name;
    uint64_t ino;
    uint64_t cookie; /* readdir offset: stable while entries come and go */
} entry;

typedef struct {
    entry *v;
    size_t n, cap;
} entries;

typedef struct {
    off_t start, end;
} range;

typedef struct {
    mode_t mode;
    uid_t uid;
    gid_t gid;
    struct timespec atime, mtime, ctime;
} meta;

typedef struct node {
    uint64_t ino;
    meta live, durable;
    int links; /* live names (a directory: its entry in its parent, "." and its subdirectories' "..") */
    /* regular files */
    int fd;           /* BACKING/blobs/INO, opened when needed */
    off_t size;       /* live size */
    int separate;     /* the durable bytes are in BACKING/durable/INO (or none: empty), not the blob */
    off_t durable_size;
    range *dirty;     /* live ranges changed since the durable copy */
    size_t ndirty, capdirty;
    int opened;
    /* directories */
    entries names, durable_names;
    uint64_t next_cookie;
    /* symbolic links */
    char *target;
    int reachable; /* scratch, for a cut */
} node;

static const char *backing;
static node **table;   /* by inode number */
static uint64_t table_cap;
static uint64_t next_ino = 2;
static int cut_done;
static struct fuse_session *session;

static void die(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    fprintf(stderr, "forgetfs: ");
    vfprintf(stderr, format, arguments);
    fprintf(stderr, "\n");
    va_end(arguments);
    exit(1);
}

static char *blob_path(const char *kind, uint64_t ino) {
    char *path;
    if (asprintf(&path, "%s/%s/%" PRIu64, backing, kind, ino) < 0) die("out of memory");
    return path;
}

static struct timespec now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t;
}

static node *get(uint64_t ino) {
    return ino < table_cap ? table[ino] : NULL;
}

static node *new_node(uint64_t ino, mode_t mode, uid_t uid, gid_t gid) {
    if (ino >= table_cap) {
        uint64_t cap = table_cap ? table_cap : 1024;
        while (cap <= ino) cap *= 2;
        table = realloc(table, cap * sizeof *table);
        if (!table) die("out of memory");
        memset(table + table_cap, 0, (cap - table_cap) * sizeof *table);
        table_cap = cap;
    }
    node *n = calloc(1, sizeof *n);
    if (!n) die("out of memory");
    n->ino = ino;
    n->fd = -1;
    n->live.mode = mode;
    n->live.uid = uid;
    n->live.gid = gid;
    n->live.atime = n->live.mtime = n->live.ctime = now();
    n->next_cookie = 3; /* 1 and 2: "." and ".." */
    table[ino] = n;
    if (ino >= next_ino) next_ino = ino + 1;
    return n;
}

/* ---- entries ---- */

static entry *find(entries *list, const char *name) {
    for (size_t i = 0; i < list->n; i++)
        if (strcmp(list->v[i].name, name) == 0) return &list->v[i];
    return NULL;
}

static void add_entry(node *dir, const char *name, uint64_t ino) {
    entries *list = &dir->names;
    if (list->n == list->cap) {
        list->cap = list->cap ? list->cap * 2 : 8;
        list->v = realloc(list->v, list->cap * sizeof *list->v);
        if (!list->v) die("out of memory");
    }
    list->v[list->n].name = strdup(name);
    list->v[list->n].ino = ino;
    list->v[list->n].cookie = dir->next_cookie++;
    list->n++;
}

static void remove_entry(entries *list, entry *e) {
    free(e->name);
    size_t i = (size_t)(e - list->v);
    memmove(list->v + i, list->v + i + 1, (list->n - i - 1) * sizeof *list->v);
    list->n--;
}

static void copy_entries(entries *to, const entries *from) {
    for (size_t i = 0; i < to->n; i++) free(to->v[i].name);
    free(to->v);
    to->n = to->cap = from->n;
    to->v = from->n ? malloc(from->n * sizeof *to->v) : NULL;
    for (size_t i = 0; i < from->n; i++) {
        to->v[i] = from->v[i];
        to->v[i].name = strdup(from->v[i].name);
    }
}

/* ---- bytes ---- */

static int file_fd(node *n) {
    if (n->fd < 0) {
        char *path = blob_path("blobs", n->ino);
        n->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (n->fd < 0) die("cannot open %s: %s", path, strerror(errno));
        free(path);
    }
    return n->fd;
}

static int copy_range(int from, int to, off_t start, off_t end) {
    static char buffer[1 << 20];
    while (start < end) {
        size_t want = (size_t)(end - start) < sizeof buffer ? (size_t)(end - start) : sizeof buffer;
        ssize_t got = pread(from, buffer, want, start);
        if (got < 0) return -errno;
        if (got == 0) break;
        for (ssize_t done = 0; done < got;) {
            ssize_t put = pwrite(to, buffer + done, (size_t)(got - done), start + done);
            if (put < 0) return -errno;
            done += put;
        }
        start += got;
    }
    return 0;
}

/* Before the first change of a file loaded as it was at mount: its bytes then are the durable ones. */
static void keep_durable_copy(node *n) {
    if (n->separate) return;
    char *path = blob_path("durable", n->ino);
    int to = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (to < 0) die("cannot create %s: %s", path, strerror(errno));
    if (copy_range(file_fd(n), to, 0, n->size) != 0) die("cannot copy to %s", path);
    close(to);
    free(path);
    n->separate = 1;
    n->durable_size = n->size;
}

static void mark_dirty(node *n, off_t start, off_t end) {
    if (start >= end) return;
    /* Merged with every range it touches. */
    size_t i = 0;
    while (i < n->ndirty) {
        range *r = &n->dirty[i];
        if (r->end < start || r->start > end) { i++; continue; }
        if (r->start < start) start = r->start;
        if (r->end > end) end = r->end;
        n->dirty[i] = n->dirty[--n->ndirty];
    }
    if (n->ndirty == n->capdirty) {
        n->capdirty = n->capdirty ? n->capdirty * 2 : 4;
        n->dirty = realloc(n->dirty, n->capdirty * sizeof *n->dirty);
        if (!n->dirty) die("out of memory");
    }
    n->dirty[n->ndirty++] = (range){start, end};
}

/* fsync/fdatasync: the live bytes and size become the durable ones. */
static int sync_data(node *n) {
    if (!S_ISREG(n->live.mode) || !n->separate) return 0;
    if (n->ndirty == 0 && n->durable_size == n->size) return 0;
    char *path = blob_path("durable", n->ino);
    int to = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    free(path);
    if (to < 0) return -errno;
    int error = 0;
    for (size_t i = 0; i < n->ndirty && error == 0; i++) {
        off_t end = n->dirty[i].end < n->size ? n->dirty[i].end : n->size;
        if (n->dirty[i].start < end) error = copy_range(file_fd(n), to, n->dirty[i].start, end);
    }
    if (error == 0 && ftruncate(to, n->size) != 0) error = -errno;
    close(to);
    if (error) return error;
    n->ndirty = 0;
    n->durable_size = n->size;
    return 0;
}

static void sync_meta(node *n) { n->durable = n->live; }

/* fsync of a directory: its entries, and the attributes of what they name. */
static void sync_dir(node *dir) {
    copy_entries(&dir->durable_names, &dir->names);
    sync_meta(dir);
    for (size_t i = 0; i < dir->names.n; i++) sync_meta(get(dir->names.v[i].ino));
}

static int sync_all(void) {
    for (uint64_t ino = 1; ino < table_cap; ino++) {
        node *n = table[ino];
        if (!n) continue;
        int error = sync_data(n);
        if (error) return error;
        sync_meta(n);
        if (S_ISDIR(n->live.mode)) copy_entries(&n->durable_names, &n->names);
    }
    return 0;
}

/* ---- the durable state on disk: BACKING/manifest and BACKING/blobs ---- */

static void hex(FILE *out, const char *text) {
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) fprintf(out, "%02x", *p);
}

static char *unhex(const char *text) {
    size_t length = strlen(text) / 2;
    char *out = malloc(length + 1);
    for (size_t i = 0; i < length; i++) sscanf(text + 2 * i, "%2hhx", (unsigned char *)&out[i]);
    out[length] = 0;
    return out;
}

static void mark_reachable(node *n) {
    if (!n || n->reachable) return;
    n->reachable = 1;
    if (S_ISDIR(n->durable.mode))
        for (size_t i = 0; i < n->durable_names.n; i++) mark_reachable(get(n->durable_names.v[i].ino));
}

/* Writes what is durable to BACKING, and drops the rest. */
static void persist_durable(void) {
    for (uint64_t ino = 1; ino < table_cap; ino++)
        if (table[ino]) table[ino]->reachable = 0;
    mark_reachable(get(FUSE_ROOT_ID));
    char *manifest_path, *temporary;
    if (asprintf(&manifest_path, "%s/manifest", backing) < 0 || asprintf(&temporary, "%s/manifest.tmp", backing) < 0)
        die("out of memory");
    FILE *out = fopen(temporary, "w");
    if (!out) die("cannot write %s: %s", temporary, strerror(errno));
    fprintf(out, "forgetfs 1\nnext %" PRIu64 "\n", next_ino);
    for (uint64_t ino = 1; ino < table_cap; ino++) {
        node *n = table[ino];
        if (!n) continue;
        if (n->fd >= 0) { close(n->fd); n->fd = -1; }
        char *blob = blob_path("blobs", ino), *durable = blob_path("durable", ino);
        if (!n->reachable) {
            unlink(blob);
            unlink(durable);
        } else if (S_ISREG(n->durable.mode)) {
            if (n->separate) {
                /* The durable copy, or an empty file where none was ever made. */
                if (rename(durable, blob) != 0) {
                    int fd = open(blob, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                    if (fd < 0) die("cannot write %s: %s", blob, strerror(errno));
                    close(fd);
                }
            }
            if (truncate(blob, n->separate ? n->durable_size : n->size) != 0) die("cannot size %s", blob);
        }
        free(blob);
        free(durable);
        if (!n->reachable) continue;
        const meta *m = &n->durable;
        fprintf(out, "node %" PRIu64 " %o %u %u %lld %ld %lld %ld %lld %ld ", ino, m->mode, m->uid, m->gid,
                (long long)m->atime.tv_sec, m->atime.tv_nsec, (long long)m->mtime.tv_sec, m->mtime.tv_nsec,
                (long long)m->ctime.tv_sec, m->ctime.tv_nsec);
        if (S_ISLNK(m->mode)) hex(out, n->target); else fputc('-', out);
        fputc('\n', out);
        if (S_ISDIR(m->mode))
            for (size_t i = 0; i < n->durable_names.n; i++) {
                fprintf(out, "entry %" PRIu64 " %" PRIu64 " ", ino, n->durable_names.v[i].ino);
                hex(out, n->durable_names.v[i].name);
                fputc('\n', out);
            }
    }
    if (fclose(out) != 0 || rename(temporary, manifest_path) != 0) die("cannot write %s", manifest_path);
    free(manifest_path);
    free(temporary);
}

static void load(void) {
    char *path, *durable;
    if (asprintf(&path, "%s/blobs", backing) < 0 || asprintf(&durable, "%s/durable", backing) < 0) die("out of memory");
    mkdir(path, 0700);
    mkdir(durable, 0700);
    /* What a cut left behind: the copies of a mount that is gone. */
    DIR *leftovers = opendir(durable);
    if (leftovers) {
        struct dirent *d;
        while ((d = readdir(leftovers)))
            if (d->d_name[0] != '.') unlinkat(dirfd(leftovers), d->d_name, 0);
        closedir(leftovers);
    }
    free(path);
    free(durable);
    if (asprintf(&path, "%s/manifest", backing) < 0) die("out of memory");
    FILE *in = fopen(path, "r");
    if (!in) {
        node *root = new_node(FUSE_ROOT_ID, S_IFDIR | 0755, getuid(), getgid());
        root->links = 2;
        root->durable = root->live;
        free(path);
        return;
    }
    char line[8192];
    while (fgets(line, sizeof line, in)) {
        line[strcspn(line, "\n")] = 0;
        uint64_t ino, child, next;
        unsigned mode, uid, gid;
        long long as, ms, cs;
        long an, mn, cn;
        char text[4200];
        if (sscanf(line, "next %" SCNu64, &next) == 1) {
            next_ino = next;
        } else if (sscanf(line, "node %" SCNu64 " %o %u %u %lld %ld %lld %ld %lld %ld %4199s", &ino, &mode, &uid, &gid, &as,
                          &an, &ms, &mn, &cs, &cn, text) == 11) {
            node *n = new_node(ino, mode, uid, gid);
            n->live.atime = (struct timespec){as, an};
            n->live.mtime = (struct timespec){ms, mn};
            n->live.ctime = (struct timespec){cs, cn};
            n->durable = n->live;
            if (S_ISLNK(mode)) n->target = unhex(text);
            if (S_ISREG(mode)) {
                struct stat st;
                if (fstat(file_fd(n), &st) != 0) die("cannot stat blob %" PRIu64, ino);
                n->size = st.st_size;
                close(n->fd);
                n->fd = -1;
            }
            if (S_ISDIR(mode)) n->links = 2;
        } else if (sscanf(line, "entry %" SCNu64 " %" SCNu64 " %4199s", &ino, &child, text) == 3) {
            node *dir = get(ino);
            if (!dir) die("manifest: entry in unknown directory %" PRIu64, ino);
            char *name = unhex(text);
            add_entry(dir, name, child);
            free(name);
        } else if (strncmp(line, "forgetfs ", 9) != 0) {
            die("manifest: cannot read: %s", line);
        }
    }
    fclose(in);
    free(path);
    for (uint64_t ino = 1; ino < table_cap; ino++) {
        node *n = table[ino];
        if (!n || !S_ISDIR(n->live.mode)) continue;
        copy_entries(&n->durable_names, &n->names);
        for (size_t i = 0; i < n->names.n; i++) {
            node *c = get(n->names.v[i].ino);
            if (!c) die("manifest: entry names unknown inode %" PRIu64, n->names.v[i].ino);
            if (S_ISDIR(c->live.mode)) n->links++; else c->links++;
        }
    }
    if (!get(FUSE_ROOT_ID)) die("manifest: no root");
}

/* ---- requests ---- */

static void fill_stat(node *n, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = n->ino;
    st->st_mode = n->live.mode;
    st->st_nlink = n->links;
    st->st_uid = n->live.uid;
    st->st_gid = n->live.gid;
    st->st_size = S_ISREG(n->live.mode) ? n->size : S_ISLNK(n->live.mode) ? (off_t)strlen(n->target) : 4096;
    st->st_blksize = 4096;
    st->st_blocks = (st->st_size + 511) / 512;
    st->st_atim = n->live.atime;
    st->st_mtim = n->live.mtime;
    st->st_ctim = n->live.ctime;
}

static void reply_entry(fuse_req_t req, node *n) {
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = n->ino;
    e.generation = 1;
    fill_stat(n, &e.attr);
    e.attr_timeout = cache_seconds;
    e.entry_timeout = cache_seconds;
    fuse_reply_entry(req, &e);
}

static void reply_attr(fuse_req_t req, node *n) {
    struct stat st;
    fill_stat(n, &st);
    fuse_reply_attr(req, &st, cache_seconds);
}

#define DOWN_CHECK(req) do { if (cut_done) { fuse_reply_err(req, EIO); return; } } while (0)

static node *directory(fuse_req_t req, fuse_ino_t ino) {
    node *dir = get(ino);
    if (!dir) { fuse_reply_err(req, ENOENT); return NULL; }
    if (!S_ISDIR(dir->live.mode)) { fuse_reply_err(req, ENOTDIR); return NULL; }
    return dir;
}

static int bad_name(fuse_req_t req, const char *name) {
    if (strlen(name) > 255) { fuse_reply_err(req, ENAMETOOLONG); return 1; }
    return 0;
}

static void touch_dir(node *dir) { dir->live.mtime = dir->live.ctime = now(); }

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    DOWN_CHECK(req);
    node *dir = directory(req, parent);
    if (!dir || bad_name(req, name)) return;
    entry *e = find(&dir->names, name);
    if (!e) {
        struct fuse_entry_param none;
        memset(&none, 0, sizeof none);
        none.entry_timeout = cache_seconds;
        fuse_reply_entry(req, &none);
        return;
    }
    reply_entry(req, get(e->ino));
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    reply_attr(req, n);
}

static int resize(node *n, off_t size) {
    keep_durable_copy(n);
    if (ftruncate(file_fd(n), size) != 0) return -errno;
    mark_dirty(n, n->size < size ? n->size : size, n->size < size ? size : n->size);
    n->size = size;
    n->live.mtime = n->live.ctime = now();
    return 0;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
    (void)fi;
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if (to_set & FUSE_SET_ATTR_SIZE) {
        if (!S_ISREG(n->live.mode)) { fuse_reply_err(req, S_ISDIR(n->live.mode) ? EISDIR : EINVAL); return; }
        int error = resize(n, attr->st_size);
        if (error) { fuse_reply_err(req, -error); return; }
    }
    if (to_set & FUSE_SET_ATTR_MODE) n->live.mode = (n->live.mode & S_IFMT) | (attr->st_mode & 07777);
    if (to_set & FUSE_SET_ATTR_UID) n->live.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) n->live.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_ATIME) n->live.atime = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME) n->live.mtime = attr->st_mtim;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) n->live.atime = now();
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) n->live.mtime = now();
    n->live.ctime = (to_set & FUSE_SET_ATTR_CTIME) ? attr->st_ctim : now();
    reply_attr(req, n);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n || !S_ISLNK(n->live.mode)) { fuse_reply_err(req, EINVAL); return; }
    fuse_reply_readlink(req, n->target);
}

static node *make(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    node *dir = directory(req, parent);
    if (!dir || bad_name(req, name)) return NULL;
    if (find(&dir->names, name)) { fuse_reply_err(req, EEXIST); return NULL; }
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    gid_t gid = (dir->live.mode & S_ISGID) ? dir->live.gid : ctx->gid;
    node *n = new_node(next_ino, mode, ctx->uid, gid);
    if (S_ISDIR(mode)) {
        n->links = 2;
        dir->links++;
        if (dir->live.mode & S_ISGID) n->live.mode |= S_ISGID;
    } else {
        n->links = 1;
    }
    if (S_ISREG(mode)) n->separate = 1; /* durable: empty, until synced */
    add_entry(dir, name, n->ino);
    touch_dir(dir);
    return n;
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
    (void)rdev;
    DOWN_CHECK(req);
    if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode)) { fuse_reply_err(req, EPERM); return; }
    node *n = make(req, parent, name, mode);
    if (n) reply_entry(req, n);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    DOWN_CHECK(req);
    node *n = make(req, parent, name, S_IFDIR | (mode & 07777));
    if (n) reply_entry(req, n);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
    DOWN_CHECK(req);
    node *n = make(req, parent, name, S_IFLNK | 0777);
    if (!n) return;
    n->target = strdup(link);
    reply_entry(req, n);
}

static void drop_link(node *n) {
    n->links--;
    n->live.ctime = now();
    if (n->links == 0 && n->opened == 0 && n->fd >= 0) { close(n->fd); n->fd = -1; }
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    DOWN_CHECK(req);
    node *dir = directory(req, parent);
    if (!dir) return;
    entry *e = find(&dir->names, name);
    if (!e) { fuse_reply_err(req, ENOENT); return; }
    node *n = get(e->ino);
    if (S_ISDIR(n->live.mode)) { fuse_reply_err(req, EISDIR); return; }
    remove_entry(&dir->names, e);
    touch_dir(dir);
    drop_link(n);
    fuse_reply_err(req, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    DOWN_CHECK(req);
    node *dir = directory(req, parent);
    if (!dir) return;
    entry *e = find(&dir->names, name);
    if (!e) { fuse_reply_err(req, ENOENT); return; }
    node *n = get(e->ino);
    if (!S_ISDIR(n->live.mode)) { fuse_reply_err(req, ENOTDIR); return; }
    if (n->names.n) { fuse_reply_err(req, ENOTEMPTY); return; }
    remove_entry(&dir->names, e);
    dir->links--;
    n->links = 0;
    touch_dir(dir);
    fuse_reply_err(req, 0);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
                      unsigned int flags) {
    DOWN_CHECK(req);
    if (flags & ~RENAME_NOREPLACE) { fuse_reply_err(req, EINVAL); return; }
    node *from = directory(req, parent);
    if (!from) return;
    node *to = directory(req, newparent);
    if (!to || bad_name(req, newname)) return;
    entry *e = find(&from->names, name);
    if (!e) { fuse_reply_err(req, ENOENT); return; }
    node *n = get(e->ino);
    entry *victim_entry = find(&to->names, newname);
    if (victim_entry && victim_entry->ino == n->ino) { fuse_reply_err(req, 0); return; } /* the same file: nothing */
    if (victim_entry) {
        if (flags & RENAME_NOREPLACE) { fuse_reply_err(req, EEXIST); return; }
        node *victim = get(victim_entry->ino);
        if (S_ISDIR(n->live.mode) && !S_ISDIR(victim->live.mode)) { fuse_reply_err(req, ENOTDIR); return; }
        if (!S_ISDIR(n->live.mode) && S_ISDIR(victim->live.mode)) { fuse_reply_err(req, EISDIR); return; }
        if (S_ISDIR(victim->live.mode)) {
            if (victim->names.n) { fuse_reply_err(req, ENOTEMPTY); return; }
            to->links--;
            victim->links = 0;
        } else {
            drop_link(victim);
        }
        remove_entry(&to->names, victim_entry);
        e = find(&from->names, name); /* the array may have moved */
    }
    uint64_t ino = e->ino;
    remove_entry(&from->names, e);
    add_entry(to, newname, ino);
    if (S_ISDIR(n->live.mode) && from != to) { from->links--; to->links++; }
    n->live.ctime = now();
    touch_dir(from);
    touch_dir(to);
    fuse_reply_err(req, 0);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
    DOWN_CHECK(req);
    node *n = get(ino);
    node *dir = directory(req, newparent);
    if (!dir || bad_name(req, newname)) return;
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if (S_ISDIR(n->live.mode)) { fuse_reply_err(req, EPERM); return; }
    if (find(&dir->names, newname)) { fuse_reply_err(req, EEXIST); return; }
    add_entry(dir, newname, n->ino);
    n->links++;
    n->live.ctime = now();
    touch_dir(dir);
    reply_entry(req, n);
}

static void opened(node *n, struct fuse_file_info *fi) {
    n->opened++;
    fi->fh = (uint64_t)fi->flags;
    fi->keep_cache = 0;
    fi->direct_io = 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if (S_ISDIR(n->live.mode)) { fuse_reply_err(req, EISDIR); return; }
    if (!S_ISREG(n->live.mode)) { fuse_reply_err(req, ENXIO); return; }
    if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY && n->size != 0) {
        int error = resize(n, 0);
        if (error) { fuse_reply_err(req, -error); return; }
    }
    opened(n, fi);
    fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    DOWN_CHECK(req);
    node *n = make(req, parent, name, S_IFREG | (mode & 07777));
    if (!n) return;
    opened(n, fi);
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = n->ino;
    e.generation = 1;
    fill_stat(n, &e.attr);
    e.attr_timeout = e.entry_timeout = cache_seconds;
    fuse_reply_create(req, &e, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi;
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    char *buffer = malloc(size ? size : 1);
    ssize_t got = pread(file_fd(n), buffer, size, off);
    if (got < 0) fuse_reply_err(req, errno); else fuse_reply_buf(req, buffer, (size_t)got);
    free(buffer);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if ((int)fi->fh & O_APPEND) off = n->size;
    keep_durable_copy(n);
    size_t done = 0;
    while (done < size) {
        ssize_t put = pwrite(file_fd(n), buf + done, size - done, off + (off_t)done);
        if (put < 0) { fuse_reply_err(req, errno); return; }
        done += (size_t)put;
    }
    mark_dirty(n, off, off + (off_t)size);
    if (off + (off_t)size > n->size) n->size = off + (off_t)size;
    n->live.mtime = n->live.ctime = now();
    fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino; (void)fi;
    fuse_reply_err(req, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    node *n = get(ino);
    if (n) {
        n->opened--;
        if (n->links == 0 && n->opened == 0 && n->fd >= 0) { close(n->fd); n->fd = -1; }
    }
    fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)fi;
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    int error = sync_data(n);
    if (error) { fuse_reply_err(req, -error); return; }
    if (!datasync) sync_meta(n);
    fuse_reply_err(req, 0);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    DOWN_CHECK(req);
    node *n = directory(req, ino);
    if (n) fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi;
    DOWN_CHECK(req);
    node *dir = directory(req, ino);
    if (!dir) return;
    char *buffer = malloc(size);
    size_t used = 0;
    struct stat st;
    memset(&st, 0, sizeof st);
    if (off < 1) {
        st.st_ino = dir->ino;
        st.st_mode = S_IFDIR;
        size_t need = fuse_add_direntry(req, buffer + used, size - used, ".", &st, 1);
        if (need > size - used) goto full;
        used += need;
    }
    if (off < 2) {
        st.st_ino = dir->ino; /* the kernel answers ".." lookups itself */
        st.st_mode = S_IFDIR;
        size_t need = fuse_add_direntry(req, buffer + used, size - used, "..", &st, 2);
        if (need > size - used) goto full;
        used += need;
    }
    for (size_t i = 0; i < dir->names.n; i++) {
        entry *e = &dir->names.v[i];
        if ((off_t)e->cookie <= off) continue;
        node *n = get(e->ino);
        st.st_ino = n->ino;
        st.st_mode = n->live.mode & S_IFMT;
        size_t need = fuse_add_direntry(req, buffer + used, size - used, e->name, &st, (off_t)e->cookie);
        if (need > size - used) break;
        used += need;
    }
full:
    fuse_reply_buf(req, buffer, used);
    free(buffer);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino; (void)fi;
    fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)datasync; (void)fi;
    DOWN_CHECK(req);
    node *dir = directory(req, ino);
    if (!dir) return;
    sync_dir(dir);
    fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
    (void)ino;
    struct statvfs st;
    memset(&st, 0, sizeof st);
    st.f_bsize = st.f_frsize = 4096;
    st.f_blocks = st.f_bfree = st.f_bavail = 1 << 24;
    st.f_files = st.f_ffree = st.f_favail = 1 << 20;
    st.f_namemax = 255;
    fuse_reply_statfs(req, &st);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
    (void)ino; (void)mask;
    fuse_reply_err(req, 0);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, struct fuse_file_info *fi) {
    (void)fi;
    DOWN_CHECK(req);
    node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if (mode != 0) { fuse_reply_err(req, EOPNOTSUPP); return; }
    if (offset + length > n->size) {
        int error = resize(n, offset + length);
        if (error) { fuse_reply_err(req, -error); return; }
    }
    fuse_reply_err(req, 0);
}

static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
                     unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz) {
    (void)ino; (void)arg; (void)fi; (void)flags; (void)in_buf; (void)in_bufsz; (void)out_bufsz;
    DOWN_CHECK(req);
    if (cmd == FORGETFS_IOC_SYNCFS) {
        int error = sync_all();
        fuse_reply_ioctl(req, -error, NULL, 0);
    } else if (cmd == FORGETFS_IOC_CUT) {
        persist_durable();
        cut_done = 1;
        fprintf(stderr, "forgetfs: power cut\n");
        fuse_reply_ioctl(req, 0, NULL, 0);
        fuse_session_exit(session);
    } else {
        fuse_reply_err(req, ENOTTY);
    }
}

static void op_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    if (conn->capable & FUSE_CAP_IOCTL_DIR) conn->want |= FUSE_CAP_IOCTL_DIR;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    /* Writes reach the daemon as they are made: what is unsynced is the daemon's to forget. */
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .access = op_access,
    .create = op_create,
    .fallocate = op_fallocate,
    .ioctl = op_ioctl,
};

int main(int argc, char *argv[]) {
    if (argc != 3) {
        fprintf(stderr, "usage: forgetfs BACKING MOUNTPOINT\n");
        return 2;
    }
    backing = argv[1];
    const char *mountpoint = argv[2];
    /* A test runner's children may inherit blocked signals: SIGTERM must unmount. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    load();
    char *fuse_argv[] = {argv[0], "-o", "fsname=forgetfs,subtype=forgetfs,default_permissions", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
    session = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!session) die("cannot start a FUSE session");
    if (fuse_set_signal_handlers(session) != 0) die("cannot set signal handlers");
    if (fuse_session_mount(session, mountpoint) != 0) die("cannot mount on %s", mountpoint);
    printf("mounted\n");
    fflush(stdout);
    int result = fuse_session_loop(session);
    if (!cut_done) {
        /* A clean unmount: every write is kept, as a clean shutdown would. */
        if (sync_all() != 0) die("cannot keep the last writes");
        persist_durable();
    }
    fuse_session_unmount(session);
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    fuse_opt_free_args(&args);
    return result < 0 ? 1 : 0;
}
