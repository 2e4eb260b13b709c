/* UTF-8 checks (include/shardd/utf8.h). */
#include "shardd/utf8.h"

#include <stdint.h>

bool sd_utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;

    while (*s) {
        unsigned char c = *s++;
        uint32_t cp;
        int more, i;

        if (c < 0x80)
            continue;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (i = 0; i < more; i++) {
            if ((s[i] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        s += more;
        if ((more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
    }
    return true;
}
