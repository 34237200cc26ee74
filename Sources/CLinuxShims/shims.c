#define _GNU_SOURCE
#include "CLinuxShims.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/netlink.h>
#include <malloc.h>
#include <linux/rtnetlink.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <spawn.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

int sa_openat_beneath(int dirfd, const char *path, int flags, mode_t mode) {
#ifdef SYS_openat2
    struct open_how how = {
        .flags = (unsigned long long)flags,
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    };
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
#else
    (void)dirfd; (void)path; (void)flags; (void)mode;
    errno = ENOSYS;
    return -1;
#endif
}

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

int sa_rename_noreplace(int fromdirfd, const char *from, int todirfd, const char *to) {
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, fromdirfd, from, todirfd, to, RENAME_NOREPLACE);
#else
    (void)fromdirfd; (void)from; (void)todirfd; (void)to;
    errno = ENOSYS;
    return -1;
#endif
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int sa_syncfs(int fd) {
    return syncfs(fd);
}

int sa_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int sa_spawn_hook(char *const argv[], char *const envp[], int output, pid_t *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int error = posix_spawn_file_actions_init(&actions);
    if (error != 0) return error;
    error = posix_spawnattr_init(&attributes);
    if (error != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return error;
    }
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    if ((error = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)) == 0
        && (output < 0 || (error = posix_spawn_file_actions_adddup2(&actions, output, 1)) == 0)
        && (output < 0 || (error = posix_spawn_file_actions_adddup2(&actions, output, 2)) == 0)
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
        /* Nothing of the agent's (its log, sockets, curl's wake-up pair) is the hook's.
         * Before glibc 2.34 only close-on-exec keeps them out. */
        && (error = posix_spawn_file_actions_addclosefrom_np(&actions, 3)) == 0
#endif
        && (error = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK
                                                          | POSIX_SPAWN_SETSIGDEF)) == 0
        && (error = posix_spawnattr_setpgroup(&attributes, 0)) == 0
        && (error = posix_spawnattr_setsigmask(&attributes, &none)) == 0
        && (error = posix_spawnattr_setsigdefault(&attributes, &all)) == 0) {
        error = posix_spawnp(pid, argv[0], &actions, &attributes, argv, envp);
    }
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return error;
}

int sa_netlink_route_socket(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl address;
    memset(&address, 0, sizeof address);
    address.nl_family = AF_NETLINK;
    address.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int error = errno;
        close(fd);
        errno = error;
        return -1;
    }
    return fd;
}

int sa_netlink_drain(int fd) {
    char buffer[8192];
    for (;;) {
        ssize_t got = recv(fd, buffer, sizeof buffer, 0);
        if (got > 0) continue;
        if (got == 0) return 0;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return -1;
    }
}

/* sd-bus, declared here (libsystemd-dev need not be installed to build). */
typedef struct sd_bus sd_bus;
typedef struct sd_bus_message sd_bus_message;
typedef struct sd_bus_slot sd_bus_slot;
typedef struct {
    const char *name;
    const char *message;
    int _need_free;
} sd_bus_error;
typedef int (*sd_bus_message_handler_t)(sd_bus_message *m, void *userdata, sd_bus_error *ret_error);

static struct {
    int (*open_system)(sd_bus **);
    int (*get_fd)(sd_bus *);
    int (*process)(sd_bus *, sd_bus_message **);
    int (*add_match)(sd_bus *, sd_bus_slot **, const char *, sd_bus_message_handler_t, void *);
    int (*new_method_call)(sd_bus *, sd_bus_message **, const char *, const char *, const char *, const char *);
    int (*message_append)(sd_bus_message *, const char *, ...);
    int (*set_auto_start)(sd_bus_message *, int);
    int (*call)(sd_bus *, sd_bus_message *, uint64_t, sd_bus_error *, sd_bus_message **);
    int (*message_read)(sd_bus_message *, const char *, ...);
    sd_bus_message *(*message_unref)(sd_bus_message *);
    sd_bus *(*unref)(sd_bus *);
    void (*error_free)(sd_bus_error *);
} sd;
/* A NetworkManager that does not answer within this holds up the agent's loop no longer. */
static const uint64_t nm_call_timeout_us = 500000;
static sd_bus *nm_bus;
static int nm_signalled;

static int nm_signal(sd_bus_message *message, void *userdata, sd_bus_error *error) {
    (void)message; (void)userdata; (void)error;
    nm_signalled = 1;
    return 0;
}

int sa_nm_open(void) {
    if (nm_bus) return sd.get_fd(nm_bus);
    /* No system bus, no libsystemd in memory (megabytes of a resident agent's
     * footprint): the caller tries again later, when one may have come. */
    if (!getenv("DBUS_SYSTEM_BUS_ADDRESS") && access("/run/dbus/system_bus_socket", F_OK) != 0) return -ENOENT;
    static void *library;
    if (!library && !(library = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL))) return -ENOENT;
    *(void **)&sd.open_system = dlsym(library, "sd_bus_open_system");
    *(void **)&sd.get_fd = dlsym(library, "sd_bus_get_fd");
    *(void **)&sd.process = dlsym(library, "sd_bus_process");
    *(void **)&sd.add_match = dlsym(library, "sd_bus_add_match");
    *(void **)&sd.new_method_call = dlsym(library, "sd_bus_message_new_method_call");
    *(void **)&sd.message_append = dlsym(library, "sd_bus_message_append");
    *(void **)&sd.set_auto_start = dlsym(library, "sd_bus_message_set_auto_start");
    *(void **)&sd.call = dlsym(library, "sd_bus_call");
    *(void **)&sd.message_read = dlsym(library, "sd_bus_message_read");
    *(void **)&sd.message_unref = dlsym(library, "sd_bus_message_unref");
    *(void **)&sd.unref = dlsym(library, "sd_bus_unref");
    *(void **)&sd.error_free = dlsym(library, "sd_bus_error_free");
    if (!sd.open_system || !sd.get_fd || !sd.process || !sd.add_match || !sd.new_method_call
        || !sd.message_append || !sd.set_auto_start || !sd.call || !sd.message_read || !sd.message_unref || !sd.unref
        || !sd.error_free) return -ENOSYS;
    sd_bus *bus = NULL;
    int result = sd.open_system(&bus);
    if (result < 0) return result;
    /* Matched by path, not sender: a well-known name in a match is resolved by
     * the bus daemon but not by sd-bus's own filter. Any signal means "read again". */
    static const char *const rules[] = {
        "type='signal',path='/org/freedesktop/NetworkManager'",
        "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.freedesktop.NetworkManager'",
    };
    for (unsigned index = 0; index < sizeof rules / sizeof rules[0]; index++) {
        /* A NULL slot ties the match to the bus for its lifetime. */
        if ((result = sd.add_match(bus, NULL, rules[index], nm_signal, NULL)) < 0) {
            sd.unref(bus);
            return result;
        }
    }
    nm_bus = bus;
    return sd.get_fd(bus);
}

void sa_nm_close(void) {
    if (nm_bus) sd.unref(nm_bus);
    nm_bus = NULL;
    nm_signalled = 0;
}

int sa_nm_process(void) {
    if (!nm_bus) return -ENOTCONN;
    int result;
    while ((result = sd.process(nm_bus, NULL)) > 0) {}
    if (result < 0) return result;
    int signalled = nm_signalled;
    nm_signalled = 0;
    return signalled;
}

/* Properties.Get of one of NetworkManager's u properties: with a short
 * timeout, and without asking the bus to start NetworkManager if it is not
 * running (a user's agent must not bring up a system service). */
static int nm_property(const char *name, unsigned *value) {
    sd_bus_message *call = NULL, *reply = NULL;
    sd_bus_error error = {NULL, NULL, 0};
    uint32_t read = 0;
    int result = sd.new_method_call(nm_bus, &call, "org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager",
                                    "org.freedesktop.DBus.Properties", "Get");
    if (result >= 0) result = sd.message_append(call, "ss", "org.freedesktop.NetworkManager", name);
    if (result >= 0) result = sd.set_auto_start(call, 0);
    if (result >= 0) result = sd.call(nm_bus, call, nm_call_timeout_us, &error, &reply);
    if (result >= 0) result = sd.message_read(reply, "v", "u", &read);
    if (result >= 0) *value = read;
    if (reply) sd.message_unref(reply);
    if (call) sd.message_unref(call);
    sd.error_free(&error);
    return result;
}

int sa_nm_read(unsigned *state, unsigned *metered) {
    if (!nm_bus) return -ENOTCONN;
    int result = nm_property("State", state);
    if (result < 0) return result;
    nm_property("Metered", metered);
    return 0;
}

int sa_open_for_writing(int fd) {
    if (fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
        /* A lease kept would make the next writer's open wait for it to be broken. */
        return fcntl(fd, F_SETLEASE, F_UNLCK) == 0 ? 0 : -1;
    }
    return errno == EAGAIN ? 1 : -1;
}

int sa_set_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

int sa_file_system_type(const char *path, long long *type) {
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    *type = (long long)info.f_type;
    return 0;
}
