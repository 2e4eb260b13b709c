/*
 * Sizes for people: the messages that say how much memory a table needs
 * and a device or host has.
 *
 * sd_bytes_text: n as "900 bytes", "11.7 KiB", "305 MiB" or "47.7 GiB"
 * (three significant digits, four from 1000 of a unit up; binary units)
 * into out, which holds
 * SD_BYTES_TEXT bytes; returns out, so that it can be an argument of the
 * printf that uses it.
 */
#ifndef SHARDD_BYTES_H
#define SHARDD_BYTES_H

#include <stdint.h>

#define SD_BYTES_TEXT 32

const char *sd_bytes_text(uint64_t n, char out[SD_BYTES_TEXT]);

#endif /* SHARDD_BYTES_H */
