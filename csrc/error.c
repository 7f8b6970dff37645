/* The C core's error vocabulary and its one setter (error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const words[] = {"", "connection", "server", "closed"};

const char *redlock_code_word(int code) {
    return code >= 0 && code <= REDLOCK_E_CLOSED ? words[code] : words[REDLOCK_E_CONNECTION];
}

int redlock_set_errorv(char *err, size_t errlen, int code, const char *name, const char *fmt,
                       va_list ap) {
    int n = name != NULL ? snprintf(err, errlen, "%s: %s: ", redlock_code_word(code), name)
                         : snprintf(err, errlen, "%s: ", redlock_code_word(code));
    /* clang 14's analyzer does not see the caller's va_start */
    if (n > 0 && (size_t)n < errlen)
        /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    return code;
}

int redlock_set_error(char *err, size_t errlen, int code, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redlock_set_errorv(err, errlen, code, name, fmt, ap);
    va_end(ap);
    return code;
}
