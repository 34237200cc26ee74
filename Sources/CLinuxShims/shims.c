#define _GNU_SOURCE
#include "CLinuxShims.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
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
