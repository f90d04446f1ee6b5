/* log.h -- conncap's logger: stderr or syslog, tagged conncap[pid], rate-limited. */
#ifndef CCAP_LOG_H
#define CCAP_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum ccap_log_level { CCAP_LOG_ERROR = 0, CCAP_LOG_WARN, CCAP_LOG_INFO, CCAP_LOG_DEBUG };
enum ccap_log_target { CCAP_LOG_STDERR = 0, CCAP_LOG_SYSLOG };

/* Sets the threshold and the target. Thread-safe (relaxed atomics). */
void ccap_log_setup(int level, int target);

/* Parses "error" | "warn" | "info" | "debug". Returns the level, or -EINVAL. */
int ccap_log_level_parse(const char *s);

/* Writes one line "conncap[pid]: LEVEL: msg" to fd 2 (never stdout) with one
 * write(2), or to syslog. At most CCAP_LOG_BURST lines per second are written;
 * the rest are counted and reported as "N messages suppressed" with the next
 * line that passes, or by ccap_log_flush at exit and exec. Preserves errno. Thread-safe; async-signal-unsafe.
 * Lines longer than 1023 bytes are cut and end in "..."; in MSG, newline,
 * CR and tab become spaces, and every other control character (C0, DEL,
 * C1) and every byte that is not part of valid UTF-8 is written as \xHH,
 * so that no text from outside (a Redis error, a host name) can move a
 * terminal's cursor or forge a line. No heap allocation. Syslog gets the same text at facility
 * user; conncap never calls openlog(), which would change the host
 * program's own ident and options. */
void ccap_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports the lines the rate limit held back and no later line reported
 * ("N messages suppressed by the rate limit"), whatever the level: for the
 * end of the process image (exit, exec). Nothing when there are none, or
 * when they were the parent's (fork child). Preserves errno. */
void ccap_log_flush(void);

#define CCAP_LOG_BURST 20

/* ---- one line per interval, for a kind of line that may come in floods ----
 * (the refusals of one semaphore): the first is written, the others within
 * the interval only counted, and the count goes with the next one written. */
struct ccap_log_every {
    _Atomic long long next_ms; /* the next line may be written from then (0: at once) */
    _Atomic unsigned held;     /* calls since the last line written that were not to write it */
};

/* True when the caller is to write its line now: the first call, or the
 * first at or after INTERVAL_MS from the last that returned true (NOW_MS:
 * a monotonic clock's ms); *HELD then gets the calls held back since that
 * one. False: this call is counted as held back. Lock-free; a zeroed E is
 * ready to use. */
bool ccap_log_every(struct ccap_log_every *e, long long now_ms, int interval_ms, unsigned *held);

/* The calls held back since E's last line, and no longer (for the report at
 * exit). Lock-free. */
unsigned ccap_log_every_take(struct ccap_log_every *e);

/* ---- text from outside (Redis, a host name) made safe to show ----
 * The one escaper of conncap's output: the logger and the CLI use it. */

/* The length of the valid UTF-8 sequence of a printable character at P (N
 * bytes left), or 0: a control character (C0, DEL, C1), a stray or missing
 * continuation byte, an overlong form, a surrogate, > U+10FFFF, or N 0.
 * Pure; thread-safe. */
size_t ccap_text_char_len(const unsigned char *p, size_t n);

#define CCAP_ESC_WS_SPACE 1  /* newline, CR and tab become a space (else \xHH) */
#define CCAP_ESC_BACKSLASH 2 /* a backslash becomes \x5c: the output reads back unambiguously */

/* Copies MSG (N bytes) to OUT (CAP bytes, not NUL-terminated) so that a
 * terminal shows it as text that cannot move the cursor or start a line:
 * every control character and every byte not part of valid UTF-8 becomes
 * \xHH (FLAGS: CCAP_ESC_*). Returns the bytes written; sets *CUT when MSG
 * did not fit. Pure; thread-safe; no allocation. */
size_t ccap_text_escape(char *out, size_t cap, const char *msg, size_t n, int flags, int *cut);

#endif
