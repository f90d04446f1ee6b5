/* names.h -- a bounded, expiring, thread-safe map from addresses to the host names that resolved to them. */
#ifndef CCAP_NAMES_H
#define CCAP_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include "config.h"
#include "match.h"

/* Defaults for the process-wide map (runtime/reload.c). The TTL of a DNS
 * answer is not visible through getaddrinfo(), so an entry lives a fixed
 * CCAP_NAMES_TTL_MS from the last time its name resolved to its address
 * (each resolution refreshes it). */
#define CCAP_NAMES_MAX 4096      /* entries (address, name) */
#define CCAP_NAMES_TTL_MS 600000 /* 10 minutes */

struct ccap_names;

/* A new, empty map holding at most MAX_ENTRIES (address, name) pairs
 * (>= 1). Memory: a bucket array of about MAX_ENTRIES/2 pointers allocated
 * here, plus per entry about 64 bytes and the name; so at most roughly
 * MAX_ENTRIES * 320 bytes. Returns NULL when out of memory. */
struct ccap_names *ccap_names_new(size_t max_entries);

/* Frees M and every entry; NULL is fine. Not thread-safe: nobody else may
 * use M any more. */
void ccap_names_free(struct ccap_names *m);

/* Records that NAME (already normalised: lower case, no trailing dot, as
 * ccap_name_normalize makes it) resolved to A (port ignored) at NOW_MS
 * (any monotonic clock in ms), valid for TTL_MS (> 0). An existing pair
 * gets its expiry max(old, NOW_MS + TTL_MS) and becomes the newest entry.
 * A new pair first drops expired entries from the oldest end, then, when
 * the map is full, evicts the least recently recorded entry. Returns 1
 * (added), 0 (refreshed), -EINVAL (bad arguments or a name longer than
 * 253), -ENOMEM. Thread-safe (write lock). */
int ccap_names_add(struct ccap_names *m, const struct ccap_addr *a, const char *name, long long now_ms, int ttl_ms);

/* Called for each name of an address; return true to stop the walk. */
typedef bool (*ccap_names_fn)(const char *name, void *arg);

/* Calls FN(name, ARG) for every unexpired name recorded for A (port and
 * family-mapping as in ccap_addr_from_sa: an IPv4-mapped IPv6 address is
 * its IPv4 address), newest first, until FN returns true. FN runs under
 * the map's read lock: it must not call back into M. Returns the number of
 * calls. NULL M is an empty map. Thread-safe (read lock, no allocation). */
size_t ccap_names_each(const struct ccap_names *m, const struct ccap_addr *a, long long now_ms, ccap_names_fn fn,
                       void *arg);

/* Drops every entry expired at NOW_MS. Returns how many. Thread-safe. */
size_t ccap_names_expire(struct ccap_names *m, long long now_ms);

/* Entries currently held (expired ones not yet dropped included). */
size_t ccap_names_count(const struct ccap_names *m);

/* The first rule of CFG (file order) that matches SA: by its address, or
 * by any unexpired name M holds for that address (with SA's port). This is
 * the shim's precedence: rule order decides, not which name or how the
 * match was made. NULL M behaves like an empty map. Thread-safe. */
const struct ccap_rule *ccap_names_match(const struct ccap_names *m, const struct ccap_config *cfg,
                                         const struct sockaddr *sa, socklen_t len, long long now_ms);

/* ccap_names_match, also writing into NAME (CAP bytes, cut to fit) the host
 * name through which the returned rule matched, or "" when it matched by
 * SA's address (or none did). For messages: the same walk again. */
const struct ccap_rule *ccap_names_match_name(const struct ccap_names *m, const struct ccap_config *cfg,
                                              const struct sockaddr *sa, socklen_t len, long long now_ms, char *name,
                                              size_t cap);

/* fork(): PREPARE takes the write lock, PARENT releases it and CHILD starts
 * it afresh (the map is consistent: no writer was inside), so a child never
 * inherits it locked by a thread that does not exist there. NULL is fine. */
void ccap_names_fork_prepare(struct ccap_names *m);
void ccap_names_fork_parent(struct ccap_names *m);
void ccap_names_fork_child(struct ccap_names *m);

#endif
