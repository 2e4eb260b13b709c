/*
 * UTF-8 as JSON writers take it (jansson's json_string(), json_plan.c's
 * writer): no overlong forms, no surrogates, nothing above U+10FFFF.
 *
 * sd_utf8_valid: whether the NUL-terminated s is such UTF-8.
 */
#ifndef SHARDD_UTF8_H
#define SHARDD_UTF8_H

#include <stdbool.h>

bool sd_utf8_valid(const char *s);

#endif /* SHARDD_UTF8_H */
