/*
 * The daemon's addresses, as its listen setting and shardctl's --addr
 * take them: unix:PATH, or HOST:PORT with an IPv6 host in brackets.
 *
 * sd_addr_problem: NULL when a is such an address, else a static string
 * saying what is wrong with it, a phrase that follows the address ("is
 * neither ...", "has a port that ..."), for a message that names the
 * setting and quotes the address.
 * The port must be an integer in [0, 65535]; a wider one is refused, not
 * wrapped onto another port.
 */
#ifndef SHARDD_ADDR_H
#define SHARDD_ADDR_H

#define SD_SUN_PATH_LIMIT 107 /* longest unix socket path (sun_path - 1) */

const char *sd_addr_problem(const char *a);

#endif /* SHARDD_ADDR_H */
