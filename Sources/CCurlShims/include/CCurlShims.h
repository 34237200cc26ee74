#ifndef SYNCAGENT_CCURLSHIMS_H
#define SYNCAGENT_CCURLSHIMS_H

#include <curl/curl.h>
#include <signal.h>

/* A result the caller must look at: Swift warns when an imported C function
 * with this attribute has its result dropped (a CURLcode, a CURLMcode). */
#define SA_CHECKED __attribute__((warn_unused_result))

/* The soname libcurl is opened by (see shims.c). */
#define SA_CURL_LIBRARY "libcurl.so.4"

/* Opens libcurl once; NULL, or why it cannot be used. Every sa_curl_ call
 * below opens it too, and stops the process if it cannot. */
SA_CHECKED const char *sa_curl_load(void);

/* libcurl's functions the agent uses, through the library opened above:
 * each is the curl_ function of the same name. */
SA_CHECKED CURLcode sa_curl_global_init(long flags);
SA_CHECKED CURL *sa_curl_easy_init(void);
void sa_curl_easy_cleanup(CURL *easy);
SA_CHECKED const char *sa_curl_easy_strerror(CURLcode code);
SA_CHECKED curl_mime *sa_curl_mime_init(CURL *easy);
void sa_curl_mime_free(curl_mime *mime);
SA_CHECKED curl_mimepart *sa_curl_mime_addpart(curl_mime *mime);
SA_CHECKED CURLcode sa_curl_mime_name(curl_mimepart *part, const char *name);
SA_CHECKED CURLcode sa_curl_mime_filename(curl_mimepart *part, const char *name);
SA_CHECKED CURLcode sa_curl_mime_type(curl_mimepart *part, const char *type);
SA_CHECKED CURLcode sa_curl_mime_data(curl_mimepart *part, const char *data, size_t size);
SA_CHECKED CURLcode sa_curl_mime_data_cb(curl_mimepart *part, curl_off_t size, curl_read_callback read, curl_seek_callback seek,
                              curl_free_callback free, void *context);
SA_CHECKED CURLM *sa_curl_multi_init(void);
SA_CHECKED CURLMcode sa_curl_multi_cleanup(CURLM *multi);
SA_CHECKED const char *sa_curl_multi_strerror(CURLMcode code);
SA_CHECKED CURLMcode sa_curl_multi_add_handle(CURLM *multi, CURL *easy);
SA_CHECKED CURLMcode sa_curl_multi_remove_handle(CURLM *multi, CURL *easy);
SA_CHECKED CURLMcode sa_curl_multi_perform(CURLM *multi, int *running);
SA_CHECKED CURLMcode sa_curl_multi_poll(CURLM *multi, struct curl_waitfd extra[], unsigned int count, int timeout_ms, int *ready);
SA_CHECKED CURLMsg *sa_curl_multi_info_read(CURLM *multi, int *left);
SA_CHECKED CURLSH *sa_curl_share_init(void);
SA_CHECKED CURLSHcode sa_curl_share_cleanup(CURLSH *share);
SA_CHECKED struct curl_slist *sa_curl_slist_append(struct curl_slist *list, const char *line);
void sa_curl_slist_free_all(struct curl_slist *list);

/*
 * Swift cannot call C variadic functions, and curl_easy_setopt,
 * curl_easy_getinfo and curl_multi_setopt are variadic. Each wrapper below
 * fixes the argument type that one family of options expects, so a wrong
 * type is a compile error in Swift instead of undefined behaviour in C.
 */

/* Options that take a long (flags, counts, timeouts). */
SA_CHECKED CURLcode sa_easy_setopt_long(CURL *easy, CURLoption option, long value);
/* Options that take a curl_off_t (offsets and byte rates beyond 2 GiB). */
SA_CHECKED CURLcode sa_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value);
/* Options that take a C string; curl copies it. */
SA_CHECKED CURLcode sa_easy_setopt_string(CURL *easy, CURLoption option, const char *value);
/* Options that take an opaque pointer (user data, slists). */
SA_CHECKED CURLcode sa_easy_setopt_pointer(CURL *easy, CURLoption option, void *value);

/* CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION share this signature. */
typedef size_t (*sa_data_callback)(char *data, size_t size, size_t count, void *context);
SA_CHECKED CURLcode sa_easy_set_write_callback(CURL *easy, sa_data_callback callback, void *context);
SA_CHECKED CURLcode sa_easy_set_header_callback(CURL *easy, sa_data_callback callback, void *context);

/* CURLOPT_READFUNCTION (request bodies) has the same shape; the seek
 * callback lets curl rewind a body it must send again (a 307 redirect). */
SA_CHECKED CURLcode sa_easy_set_read_callback(CURL *easy, sa_data_callback callback, void *context);
typedef int (*sa_seek_callback)(void *context, curl_off_t offset, int origin);
SA_CHECKED CURLcode sa_easy_set_seek_callback(CURL *easy, sa_seek_callback callback, void *context);

SA_CHECKED CURLcode sa_easy_getinfo_long(CURL *easy, CURLINFO info, long *value);
SA_CHECKED CURLcode sa_easy_getinfo_off(CURL *easy, CURLINFO info, curl_off_t *value);
SA_CHECKED CURLcode sa_easy_getinfo_string(CURL *easy, CURLINFO info, const char **value);
SA_CHECKED CURLcode sa_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value);

SA_CHECKED CURLSHcode sa_share_setopt_long(CURLSH *share, CURLSHoption option, long value);

SA_CHECKED CURLMcode sa_multi_setopt_long(CURLM *multi, CURLMoption option, long value);

/* CURLMsg.data is a union; Swift reads it awkwardly, so pick the field here. */
SA_CHECKED CURLcode sa_msg_result(const CURLMsg *message);

/* sys/signalfd.h is not part of Glibc's Swift module map. Blocks SIGTERM,
 * SIGINT, SIGHUP (reload the config) and ignores SIGPIPE (which curl may
 * raise) and SIGIO (a job file's lease broken, see sa_open_for_writing);
 * returns an fd that becomes readable when one of those arrives, so the
 * event loop polls for it. */
SA_CHECKED int sa_stop_signal_fd(void);
/* Reads one pending signal from that fd; returns its number or -1. */
SA_CHECKED int sa_read_signal(int fd);

#endif
