#ifndef SYNCAGENT_CLINUXSHIMS_H
#define SYNCAGENT_CLINUXSHIMS_H

#include <sys/types.h>

/*
 * openat2(2) has no glibc wrapper, and Swift cannot build its struct
 * open_how from the kernel header. Opens `path` relative to `dirfd` the way
 * a destination must be opened (SPEC §7): never above `dirfd`
 * (RESOLVE_BENEATH) and through no symbolic link in any component
 * (RESOLVE_NO_SYMLINKS). Returns the fd, or -1 with errno set; ENOSYS on a
 * kernel older than 5.6, where the caller walks component by component.
 */
int sa_openat_beneath(int dirfd, const char *path, int flags, mode_t mode);

#endif
