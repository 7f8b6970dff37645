#ifndef REDLOCK_ERROR_H
#define REDLOCK_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* The C core's one error vocabulary: a code, and the word its message
 * starts with (DESIGN.md's codes, the C side's share of them). Every C
 * failure is a code and a message "word: server: what", set by
 * redlock_set_error. */
enum redlock_code {
    REDLOCK_OK = 0,
    REDLOCK_E_CONNECTION = 1, /* could not connect, lost, timed out */
    REDLOCK_E_SERVER = 2,     /* Redis answered with an error */
    REDLOCK_E_CLOSED = 3      /* the connection or client is closed */
};

/* "", "connection", "server", "closed" */
const char *redlock_code_word(int code);

#if defined(__GNUC__)
#define REDLOCK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define REDLOCK_PRINTF(f, a)
#endif

/* The one setter: err (errlen bytes) = "<code's word>: <name>: <fmt ...>"
 * (name NULL: "<word>: <fmt ...>"). Returns code. */
int redlock_set_error(char *err, size_t errlen, int code, const char *name, const char *fmt, ...)
    REDLOCK_PRINTF(5, 6);
/* The same with a va_list. */
int redlock_set_errorv(char *err, size_t errlen, int code, const char *name, const char *fmt,
                       va_list ap) REDLOCK_PRINTF(5, 0);

#endif
