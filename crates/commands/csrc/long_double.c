/* INCRBYFLOAT in C's long double, parsed with strtold and printed with "%.17Lf", trailing
 * zeros removed: the exact arithmetic and text Redis produces on the same platform. Rust has no
 * long double, and an emulation would drift from Redis in the last digits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

#define MAX_LONG_DOUBLE_CHARS (5 * 1024)

/* Redis's string2ld: whole string, no leading space, no NaN, no overflow to +-HUGE_VAL/0. */
static int parse_ld(const char *s, size_t len, long double *out) {
    char buf[MAX_LONG_DOUBLE_CHARS];
    char *eptr;
    if (len == 0 || len >= sizeof(buf)) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    long double v = strtold(buf, &eptr);
    if (isspace((unsigned char)buf[0]) || eptr[0] != '\0' || (size_t)(eptr - buf) != len ||
        ((errno == ERANGE) && (v == HUGE_VALL || v == -HUGE_VALL || fpclassify(v) == FP_ZERO)) ||
        isnan(v))
        return 0;
    *out = v;
    return 1;
}

/* Returns: >0 length of the result in out; -1 value not a float; -2 increment not a float;
 * -3 result NaN or infinite. A missing value is passed as len 0 with is_missing set. */
int damselfly_incrbyfloat(const char *val, size_t val_len, int is_missing,
                          const char *incr, size_t incr_len, char *out, size_t out_len) {
    long double value = 0, by;
    if (!is_missing && !parse_ld(val, val_len, &value)) return -1;
    if (!parse_ld(incr, incr_len, &by)) return -2;
    value += by;
    if (isnan(value) || isinf(value)) return -3;
    int l = snprintf(out, out_len, "%.17Lf", value);
    if (l < 0 || (size_t)l + 1 > out_len) return -3;
    if (strchr(out, '.') != NULL) {
        char *p = out + l - 1;
        while (*p == '0') { p--; l--; }
        if (*p == '.') l--;
    }
    if (l == 2 && out[0] == '-' && out[1] == '0') { out[0] = '0'; l = 1; }
    return l;
}
