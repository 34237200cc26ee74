#include "CCurlShims.h"

#include <sys/signalfd.h>
#include <unistd.h>

CURLcode sa_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    return curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_setopt_string(CURL *easy, CURLoption option, const char *value) {
    return curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_setopt_pointer(CURL *easy, CURLoption option, void *value) {
    return curl_easy_setopt(easy, option, value);
}

CURLcode sa_easy_set_write_callback(CURL *easy, sa_data_callback callback, void *context) {
    CURLcode code = curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, callback);
    return code != CURLE_OK ? code : curl_easy_setopt(easy, CURLOPT_WRITEDATA, context);
}

CURLcode sa_easy_set_header_callback(CURL *easy, sa_data_callback callback, void *context) {
    CURLcode code = curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, callback);
    return code != CURLE_OK ? code : curl_easy_setopt(easy, CURLOPT_HEADERDATA, context);
}

CURLcode sa_easy_set_read_callback(CURL *easy, sa_data_callback callback, void *context) {
    CURLcode code = curl_easy_setopt(easy, CURLOPT_READFUNCTION, callback);
    return code != CURLE_OK ? code : curl_easy_setopt(easy, CURLOPT_READDATA, context);
}

CURLcode sa_easy_set_seek_callback(CURL *easy, sa_seek_callback callback, void *context) {
    CURLcode code = curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, callback);
    return code != CURLE_OK ? code : curl_easy_setopt(easy, CURLOPT_SEEKDATA, context);
}

CURLcode sa_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    return curl_easy_getinfo(easy, info, value);
}

CURLcode sa_easy_getinfo_off(CURL *easy, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(easy, info, value);
}

CURLcode sa_easy_getinfo_string(CURL *easy, CURLINFO info, const char **value) {
    return curl_easy_getinfo(easy, info, value);
}

CURLcode sa_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    return curl_easy_getinfo(easy, info, value);
}

CURLSHcode sa_share_setopt_long(CURLSH *share, CURLSHoption option, long value) {
    return curl_share_setopt(share, option, value);
}

CURLMcode sa_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
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
    signal(SIGPIPE, SIG_IGN);
    /* A lease taken to see whether a job is still being written may be broken by a writer. */
    signal(SIGIO, SIG_IGN);
    return signalfd(-1, &stops, SFD_NONBLOCK | SFD_CLOEXEC);
}

int sa_read_signal(int fd) {
    struct signalfd_siginfo info;
    ssize_t got = read(fd, &info, sizeof info);
    return got == (ssize_t)sizeof info ? (int)info.ssi_signo : -1;
}
