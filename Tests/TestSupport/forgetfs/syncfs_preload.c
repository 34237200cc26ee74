/*
 * libforgetfs-syncfs.so, for LD_PRELOAD: syncfs(2) never reaches a FUSE
 * daemon (the kernel sends FUSE_SYNCFS to virtiofs only), so after each real
 * syncfs this tells forgetfs, by its ioctl on the same descriptor, to make
 * everything durable. On any other file system the ioctl fails (ENOTTY) and
 * nothing changes: the result is the real syncfs's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FORGETFS_IOC_SYNCFS _IO(0xF7, 0x41)

int syncfs(int fd) {
    int result = (int)syscall(SYS_syncfs, fd);
    if (result == 0) {
        int saved = errno;
        (void)ioctl(fd, FORGETFS_IOC_SYNCFS);
        errno = saved;
    }
    return result;
}
