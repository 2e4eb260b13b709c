/* The daemon's addresses (include/shardd/addr.h). */
#include "shardd/addr.h"

#include <stdlib.h>
#include <string.h>

const char *sd_addr_problem(const char *a)
{
    const char *colon, *port;
    size_t hostlen;

    if (strncmp(a, "unix:", 5) == 0) {
        if (a[5] == '\0')
            return "has an empty socket path";
        if (strlen(a + 5) > SD_SUN_PATH_LIMIT)
            return "has a socket path longer than 107 bytes";
        return NULL;
    }
    if (strpbrk(a, " \t") != NULL)
        return "contains white space";
    colon = strrchr(a, ':');
    if (colon == NULL)
        return "is neither unix:PATH nor HOST:PORT";
    hostlen = (size_t)(colon - a);
    port = colon + 1;
    if (hostlen == 0)
        return "has no host (0.0.0.0:PORT or [::]:PORT means every "
               "interface)";
    if (a[0] == '[' ? a[hostlen - 1] != ']' || hostlen < 3
                    : memchr(a, ':', hostlen) != NULL)
        return "has an IPv6 host without brackets (give [::1]:7411)";
    if (port[0] == '\0' || strspn(port, "0123456789") != strlen(port) ||
        strlen(port) > 5 || strtoul(port, NULL, 10) > 65535)
        return "has a port that is not an integer in [0, 65535]";
    return NULL;
}
