#include "CCurlShims.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <unistd.h>

/*
 * libcurl is opened by the agent as it starts (CurlMulti), not linked: as a
 * dependency of the binary, it and the libraries it needs (TLS, Kerberos,
 * LDAP, SSH, IDN: 30 of them) were loaded and relocated by every command,
 * 6.8 ms of a `status` that otherwise takes 45. Only `run` transfers. So
 * this shim holds more than wrappers of variadic functions: the table of
 * libcurl's functions, and one wrapper for each.
 */
#define SA_CURL_FUNCTIONS(X) \
    X(curl_global_init) X(curl_easy_init) X(curl_easy_cleanup) X(curl_easy_setopt) X(curl_easy_getinfo) \
    X(curl_easy_strerror) X(curl_mime_init) X(curl_mime_free) X(curl_mime_addpart) X(curl_mime_name) \
    X(curl_mime_filename) X(curl_mime_type) X(curl_mime_data) X(curl_mime_data_cb) X(curl_multi_init) \
    X(curl_multi_cleanup) X(curl_multi_strerror) X(curl_multi_add_handle) X(curl_multi_remove_handle) X(curl_multi_perform) \
    X(curl_multi_poll) X(curl_multi_info_read) X(curl_multi_setopt) X(curl_share_init) X(curl_share_cleanup) \
    X(curl_share_setopt) X(curl_slist_append) X(curl_slist_free_all)

#define SA_CURL_POINTER(name) static __typeof__(&name) p_##name;
SA_CURL_FUNCTIONS(SA_CURL_POINTER)

static pthread_once_t sa_curl_once = PTHREAD_ONCE_INIT;
static char sa_curl_error[512];

static void sa_curl_open(void) {
    void *library = dlopen(SA_CURL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *why = dlerror();
        snprintf(sa_curl_error, sizeof sa_curl_error, "cannot load %s (install libcurl4): %s", SA_CURL_LIBRARY, why ? why : "?");
        return;
    }
#define SA_CURL_FIND(name) \
    if ((p_##name = (__typeof__(&name))dlsym(library, #name)) == NULL) { \
        const char *why = dlerror(); \
        snprintf(sa_curl_error, sizeof sa_curl_error, "%s has no %s: %s", SA_CURL_LIBRARY, #name, why ? why : "?"); \
        return; \
    }
    SA_CURL_FUNCTIONS(SA_CURL_FIND)
}

const char *sa_curl_load(void) {
    pthread_once(&sa_curl_once, sa_curl_open);
    return sa_curl_error[0] != 0 ? sa_curl_error : NULL;
}

/* Precondition of every sa_curl_ call: the agent made its CurlMulti, which
 * loads libcurl or stops the agent with the reason, before any transfer.
 * A call that still finds it missing has no way to report an error, and stops here. */
static void sa_curl_need(void) {
    const char *error = sa_curl_load();
    if (error != NULL) {
        fprintf(stderr, "syncagent: %s\n", error);
        abort();
    }
}

CURLcode sa_curl_global_init(long flags) { sa_curl_need(); return p_curl_global_init(flags); }
CURL *sa_curl_easy_init(void) { sa_curl_need(); return p_curl_easy_init(); }
void sa_curl_easy_cleanup(CURL *easy) { sa_curl_need(); p_curl_easy_cleanup(easy); }
const char *sa_curl_easy_strerror(CURLcode code) { sa_curl_need(); return p_curl_easy_strerror(code); }
curl_mime *sa_curl_mime_init(CURL *easy) { sa_curl_need(); return p_curl_mime_init(easy); }
void sa_curl_mime_free(curl_mime *mime) { sa_curl_need(); p_curl_mime_free(mime); }
curl_mimepart *sa_curl_mime_addpart(curl_mime *mime) { sa_curl_need(); return p_curl_mime_addpart(mime); }
CURLcode sa_curl_mime_name(curl_mimepart *part, const char *name) { sa_curl_need(); return p_curl_mime_name(part, name); }
CURLcode sa_curl_mime_filename(curl_mimepart *part, const char *name) { sa_curl_need(); return p_curl_mime_filename(part, name); }
CURLcode sa_curl_mime_type(curl_mimepart *part, const char *type) { sa_curl_need(); return p_curl_mime_type(part, type); }
CURLcode sa_curl_mime_data(curl_mimepart *part, const char *data, size_t size) {
    sa_curl_need();
    return p_curl_mime_data(part, data, size);
}
CURLcode sa_curl_mime_data_cb(curl_mimepart *part, curl_off_t size, curl_read_callback read, curl_seek_callback seek,
                              curl_free_callback free, void *context) {
    sa_curl_need();
    return p_curl_mime_data_cb(part, size, read, seek, free, context);
}
CURLM *sa_curl_multi_init(void) { sa_curl_need(); return p_curl_multi_init(); }
CURLMcode sa_curl_multi_cleanup(CURLM *multi) { sa_curl_need(); return p_curl_multi_cleanup(multi); }
const char *sa_curl_multi_strerror(CURLMcode code) { sa_curl_need(); return p_curl_multi_strerror(code); }
CURLMcode sa_curl_multi_add_handle(CURLM *multi, CURL *easy) { sa_curl_need(); return p_curl_multi_add_handle(multi, easy); }
CURLMcode sa_curl_multi_remove_handle(CURLM *multi, CURL *easy) { sa_curl_need(); return p_curl_multi_remove_handle(multi, easy); }
CURLMcode sa_curl_multi_perform(CURLM *multi, int *running) { sa_curl_need(); return p_curl_multi_perform(multi, running); }
CURLMcode sa_curl_multi_poll(CURLM *multi, struct curl_waitfd extra[], unsigned int count, int timeout_ms, int *ready) {
    sa_curl_need();
    return p_curl_multi_poll(multi, extra, count, timeout_ms, ready);
}
CURLMsg *sa_curl_multi_info_read(CURLM *multi, int *left) { sa_curl_need(); return p_curl_multi_info_read(multi, left); }
CURLSH *sa_curl_share_init(void) { sa_curl_need(); return p_curl_share_init(); }
CURLSHcode sa_curl_share_cleanup(CURLSH *share) { sa_curl_need(); return p_curl_share_cleanup(share); }
struct curl_slist *sa_curl_slist_append(struct curl_slist *list, const char *line) {
    sa_curl_need();
    return p_curl_slist_append(list, line);
}
void sa_curl_slist_free_all(struct curl_slist *list) { sa_curl_need(); p_curl_slist_free_all(list); }

CURLcode sa_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    sa_curl_need();
    return p_curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value) {
    sa_curl_need();
    return p_curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_setopt_string(CURL *easy, CURLoption option, const char *value) {
    sa_curl_need();
    return p_curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_setopt_pointer(CURL *easy, CURLoption option, void *value) {
    sa_curl_need();
    return p_curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_set_write_callback(CURL *easy, sa_data_callback callback, void *context) {
    sa_curl_need();
    CURLcode code = p_curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, callback);
    return code != CURLE_OK ? code : p_curl_easy_setopt(easy, CURLOPT_WRITEDATA, context);
}

CURLcode sa_easy_set_header_callback(CURL *easy, sa_data_callback callback, void *context) {
    sa_curl_need();
    CURLcode code = p_curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, callback);
    return code != CURLE_OK ? code : p_curl_easy_setopt(easy, CURLOPT_HEADERDATA, context);
}

CURLcode sa_easy_set_read_callback(CURL *easy, sa_data_callback callback, void *context) {
    sa_curl_need();
    CURLcode code = p_curl_easy_setopt(easy, CURLOPT_READFUNCTION, callback);
    return code != CURLE_OK ? code : p_curl_easy_setopt(easy, CURLOPT_READDATA, context);
}

CURLcode sa_easy_set_seek_callback(CURL *easy, sa_seek_callback callback, void *context) {
    sa_curl_need();
    CURLcode code = p_curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, callback);
    return code != CURLE_OK ? code : p_curl_easy_setopt(easy, CURLOPT_SEEKDATA, context);
}

CURLcode sa_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    sa_curl_need();
    return p_curl_easy_getinfo(easy, info, value);
}

CURLcode sa_easy_getinfo_off(CURL *easy, CURLINFO info, curl_off_t *value) {
    sa_curl_need();
    return p_curl_easy_getinfo(easy, info, value);
}

CURLcode sa_easy_getinfo_string(CURL *easy, CURLINFO info, const char **value) {
    sa_curl_need();
    return p_curl_easy_getinfo(easy, info, value);
}

CURLcode sa_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    sa_curl_need();
    return p_curl_easy_getinfo(easy, info, value);
}

CURLSHcode sa_share_setopt_long(CURLSH *share, CURLSHoption option, long value) {
    sa_curl_need();
    return p_curl_share_setopt(share, option, value);
}

CURLMcode sa_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    sa_curl_need();
    return p_curl_multi_setopt(multi, option, value);
}

CURLcode sa_msg_result(const CURLMsg *message) {
    return message->data.result;
}

int sa_stop_signal_fd(void) {
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &stops, NULL) != 0) return -1;
    /* A lease taken to see whether a job is still being written may be broken by a writer. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || signal(SIGIO, SIG_IGN) == SIG_ERR) return -1;
    return signalfd(-1, &stops, SFD_NONBLOCK | SFD_CLOEXEC);
}

int sa_read_signal(int fd) {
    struct signalfd_siginfo info;
    ssize_t got = read(fd, &info, sizeof info);
    return got == (ssize_t)sizeof info ? (int)info.ssi_signo : -1;
}
