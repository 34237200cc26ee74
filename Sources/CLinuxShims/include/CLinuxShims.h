#ifndef SYNCAGENT_CLINUXSHIMS_H
#define SYNCAGENT_CLINUXSHIMS_H

#include <sys/types.h>

/*
 * Every shim that answers something says whether it worked: dropping that
 * answer is a warning, in C and in Swift (which imports a function marked
 * so without @discardableResult). Swift calls these only in Posix.swift.
 */
#define SA_MUST_USE __attribute__((warn_unused_result))

/*
 * openat2(2) has no glibc wrapper, and Swift cannot build its struct
 * open_how from the kernel header. Opens `path` relative to `dirfd` the way
 * a destination must be opened (SPEC §7): never above `dirfd`
 * (RESOLVE_BENEATH) and through no symbolic link in any component
 * (RESOLVE_NO_SYMLINKS). Returns the fd, or -1 with errno set; ENOSYS on a
 * kernel older than 5.6, where the caller walks component by component.
 */
SA_MUST_USE int sa_openat_beneath(int dirfd, const char *path, int flags, mode_t mode);

/*
 * renameat2(2) with RENAME_NOREPLACE: moves `from` to `to` only if nothing
 * is at `to` (EEXIST otherwise), in one step. Returns 0, or -1 with errno
 * set; EINVAL or ENOSYS where the file system or kernel lacks it.
 */
SA_MUST_USE int sa_rename_noreplace(int fromdirfd, const char *from, int todirfd, const char *to);

/*
 * statfs(2)'s f_type for `path` (a file system's magic number), which
 * Swift's Glibc module does not import (sys/vfs.h). Returns 0 with *type
 * set, or -1 with errno set.
 */
SA_MUST_USE int sa_file_system_type(const char *path, long long *type);

/*
 * pidfd_open(2), which glibc before 2.36 does not wrap: an fd that polls
 * readable when the process exits, so the agent's one poll sees a hook end.
 * Returns -1 with errno set (ENOSYS before Linux 5.3).
 */
SA_MUST_USE int sa_pidfd_open(pid_t pid);

/*
 * Whether a process still has the file behind `fd` (opened read-only) open
 * for writing: the kernel refuses a read lease (F_SETLEASE) with EAGAIN
 * then. Returns 1 (open for writing), 0 (not), or -1 with errno set where
 * leases cannot tell (EACCES: not the file's owner; EINVAL: no leases on
 * that file system). A lease taken is given back at once; a writer opening
 * the file in between breaks it, which raises SIGIO (the agent ignores it).
 */
SA_MUST_USE int sa_open_for_writing(int fd);

/* syncfs(2), a GNU extension Swift's Glibc module does not show: flushes
 * the file system holding fd. Returns 0, or -1 with errno set. */
SA_MUST_USE int sa_syncfs(int fd);

/*
 * Starts a hook (SPEC §5): `argv[0]` searched on PATH, no shell, standard
 * input from /dev/null, standard output and error to `output` (if >= 0),
 * no other descriptor of the agent's, in a process group of its own (so a
 * hook past its time limit is killed with whatever it started), with no
 * signal blocked or ignored (the agent blocks its stop signals for its
 * signalfd, and a child would inherit that). Returns 0 and sets *pid, or
 * an errno value.
 */
SA_MUST_USE int sa_spawn_hook(char *const argv[], char *const envp[], int output, pid_t *pid);

/*
 * The kernel's routing events (rtnetlink): an fd, non-blocking, that polls
 * readable when a link goes up or down or a route comes or goes. Returns
 * the fd, or -1 with errno set.
 */
SA_MUST_USE int sa_netlink_route_socket(void);

/* Reads and discards every pending message of that fd. Returns 0, or -1
 * with errno set (ENOBUFS: messages were lost; the caller looks afresh). */
SA_MUST_USE int sa_netlink_drain(int fd);

/*
 * NetworkManager over the system bus (DBUS_SYSTEM_BUS_ADDRESS honoured),
 * through libsystemd's sd-bus loaded with dlopen: no build dependency, and
 * a machine without it (or without a system bus) simply has no
 * NetworkManager. One connection per process.
 *
 * sa_nm_open connects and subscribes to NetworkManager's signals; returns
 * the bus fd to poll, or a negative errno.
 */
SA_MUST_USE int sa_nm_open(void);

/* Releases the connection (a bus that went away), so that sa_nm_open can
 * connect again. */
void sa_nm_close(void);

/* Processes whatever the bus fd has. Returns 1 if NetworkManager signalled
 * something (or its name changed owner) since the last call, 0 if not, or a
 * negative errno (the bus is gone). */
SA_MUST_USE int sa_nm_process(void);

/* Reads NetworkManager's State and Metered (Metered left as is when it
 * cannot be read), each call waiting at most half a second and never
 * starting NetworkManager. Returns 0 if State could be read (NetworkManager
 * runs), or a negative errno. */
SA_MUST_USE int sa_nm_read(unsigned *state, unsigned *metered);

/* glibc's mallopt(M_MMAP_THRESHOLD, bytes): blocks over `bytes` get pages
 * of their own, given back when freed (malloc.h is not in Swift's Glibc).
 * Returns 1 on success, 0 if refused. */
SA_MUST_USE int sa_set_mmap_threshold(int bytes);

#endif
