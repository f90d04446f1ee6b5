/* redis_defer.c -- commands sent without waiting for their replies, kept until a reply says they ran. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_int.h"

#define CCAP_DEFER_MAX 256

/* E is written and its reply not read yet (its connection still the one it
 * was written to). */
static bool owed(const struct ccap_deferred *e)
{
    return e->sent_on && e->sent_on->ctx && e->sent_on->gen == e->gen;
}

/* The index of the command whose argv is ARGV (entries move when others
 * are dropped, by a collect nested in a connect or SCRIPT LOAD), or -1. */
static long find(const struct ccap_redis *r, char **argv)
{
    for (size_t i = 0; i < r->n_defer; i++)
        if (r->defer[i].argv == argv)
            return (long)i;
    return -1;
}

static void drop_at(struct ccap_redis *r, size_t i)
{
    free(r->defer[i].argv);
    memmove(&r->defer[i], &r->defer[i + 1], (r->n_defer - i - 1) * sizeof *r->defer);
    r->n_defer--;
}

/* "EVALSHA" sha nkeys ARGS... as one allocation: the pointers, then the strings. */
static char **pack_argv(enum ccap_script which, int nkeys, int argc, const char *const *args, int *out_argc)
{
    char nk[CCAP_FMT_LL_LEN];
    const char *head[3] = { "EVALSHA", ccap_script_sha(which), nk };
    size_t bytes = 0;
    char **v, *p;

    ccap_fmt_ll(nk, nkeys);
    for (int i = 0; i < 3; i++)
        bytes += strlen(head[i]) + 1;
    for (int i = 0; i < argc; i++)
        bytes += strlen(args[i]) + 1;
    v = malloc(sizeof *v * (size_t)(argc + 3) + bytes);
    if (!v)
        return NULL;
    p = (char *)(v + argc + 3);
    for (int i = 0; i < argc + 3; i++) {
        const char *s = i < 3 ? head[i] : args[i - 3];
        size_t n = strlen(s) + 1;

        memcpy(p, s, n);
        v[i] = p;
        p += n;
    }
    *out_argc = argc + 3;
    return v;
}

int ccap_defer_collect(struct ccap_redis *r, struct ccap_node *n, long long deadline)
{
    size_t i = 0;

    while (i < r->n_defer) {
        struct ccap_deferred *e = &r->defer[i];
        redisReply *rep;
        int rc;

        if (e->sent_on != n || !owed(e)) {
            i++;
            continue;
        }
        /* named by its script: it went out as FCALL, EVALSHA or EVAL (ccap_node_script_send) */
        const char *name = e->which >= 0 ? ccap_script_function(e->which) : NULL;
        if ((rc = ccap_node_read(r, n, name ? name : e->argv[0], deadline, &rep)) < 0) {
            /* the connection is gone (or timed out): what it owed waits to be
             * sent again; told as any read of a reply is */
            if (rc == -ETIMEDOUT)
                ccap_node_drop(n);
            return rc == -ETIMEDOUT ? rc : -EPIPE;
        }
        if (rep->type == REDIS_REPLY_ERROR) {
            e->sent_on = NULL; /* NOSCRIPT, a redirect...: run again by the sync path */
            ccap_redis_set_err(r, "redis (deferred): %s", rep->str);
            i++;
        } else {
            drop_at(r, i);
        }
        freeReplyObject(rep);
    }
    return 0;
}

/* Runs the command at index I synchronously, with redirects and NOSCRIPT
 * recovery; drops it when it ran or can never run. Returns 0 (it ran),
 * -EPROTO (Redis refused it for good: dropped, the text in R's error), or
 * -errno (transport, -EAGAIN or -EACCES: it stays). Nested calls may read other
 * commands' replies and drop those: this one is found again by its argv. */
static int run_now(struct ccap_redis *r, size_t i)
{
    struct ccap_deferred e = r->defer[i]; /* argv stays ours: only its own drop frees it */
    redisReply *rep;
    long j;
    int rc = ccap_redis_dispatch(r, e.slot, e.which, e.argc, (const char *const *)e.argv, &rep);

    if (rc < 0)
        return rc;
    rc = rep->type == REDIS_REPLY_ERROR ? ccap_redis_error_rc(r, rep) : 0;
    freeReplyObject(rep);
    if (rc < 0 && rc != -EPROTO)
        return rc; /* Redis cannot serve now: it stays */
    if ((j = find(r, e.argv)) >= 0)
        drop_at(r, (size_t)j); /* ran, or refused for good (-EPROTO: the text is in R's error) */
    return rc;
}

/* The sync path: every command not owed by a live connection runs now,
 * oldest first; those past their time are dropped unsent. Stops at the
 * first failure. Each one run is dropped (or we stop), so the scan starts
 * over after it: indices may have moved meanwhile. */
static int run_unsent(struct ccap_redis *r)
{
    long long now = ccap_now_ms();
    int rc = 0;

    if (r->flushing)
        return 0;
    r->flushing = true;
    for (size_t i = 0; i < r->n_defer;) {
        if (owed(&r->defer[i])) {
            i++;
        } else if (r->defer[i].until_ms <= now) {
            drop_at(r, i);
        } else {
            if ((rc = run_now(r, i)) < 0)
                break;
            i = 0;
        }
    }
    r->flushing = false;
    return rc;
}

void ccap_defer_retry(struct ccap_redis *r)
{
    for (size_t i = 0; i < r->n_defer; i++)
        if (!owed(&r->defer[i])) {
            run_unsent(r);
            return;
        }
}

void ccap_defer_clear(struct ccap_redis *r)
{
    while (r->n_defer)
        drop_at(r, r->n_defer - 1);
    free(r->defer);
    r->defer = NULL;
}

/* Makes room for one more: reads the oldest owed replies, else drops the
 * oldest unsent command (its lease ends first). */
static void make_room(struct ccap_redis *r)
{
    if (r->n_defer < CCAP_DEFER_MAX)
        return;
    if (owed(&r->defer[0]))
        ccap_defer_collect(r, r->defer[0].sent_on, ccap_now_ms() + r->conf.command_timeout_ms);
    if (r->n_defer == CCAP_DEFER_MAX)
        drop_at(r, 0);
}

int ccap_redis_script_defer(struct ccap_redis *r, enum ccap_script which, int nkeys, int argc,
                            const char *const *args, long long until_ms, bool send)
{
    struct ccap_deferred *e;
    struct ccap_node *n;
    int fresh, rc;

    r->err[0] = '\0';
    if ((unsigned)which >= CCAP_SCRIPT_COUNT || nkeys < 1 || argc < nkeys || !args)
        return -EINVAL;
    if (!r->defer && !(r->defer = calloc(CCAP_DEFER_MAX, sizeof *r->defer)))
        return -ENOMEM;
    make_room(r);
    e = &r->defer[r->n_defer];
    memset(e, 0, sizeof *e);
    if (!(e->argv = pack_argv(which, nkeys, argc, args, &e->argc)))
        return -ENOMEM;
    e->which = (int)which;
    e->slot = r->mode == CCAP_MODE_CLUSTER ? ccap_redis_key_slot(args[0], strlen(args[0])) : -1;
    e->until_ms = until_ms;
    r->n_defer++;
    if (!send)
        return 0;
    /* a reused connection the server closed shows at the write at best:
     * once more on a fresh one (as ccap_redis_script does). Connecting and
     * SCRIPT LOAD may read other commands' replies and drop those, moving
     * this one: it is found again by its argv. */
    char **argv = e->argv;
    int slot = e->slot, n_args = e->argc;
    for (int tries = 0; tries < 2; tries++) {
        long j;

        if ((rc = ccap_redis_pick(r, slot, &n, &fresh)) < 0)
            return rc;
        /* FCALL, or EVALSHA of a script loaded first: a NOSCRIPT would
         * leave it undone until the next command */
        if ((rc = ccap_node_script_send(r, n, (int)which, n_args, (const char *const *)argv,
                                        ccap_now_ms() + r->conf.command_timeout_ms)) == 0) {
            if ((j = find(r, argv)) >= 0) {
                r->defer[j].sent_on = n;
                r->defer[j].gen = n->gen;
            }
            return 0;
        }
        if (rc != -EPIPE || fresh)
            break;
    }
    return rc;
}

int ccap_redis_flush(struct ccap_redis *r)
{
    int rc = 0;

    r->err[0] = '\0';
    for (size_t i = 0; i < r->n_defer; i++) {
        if (!owed(&r->defer[i]))
            continue;
        /* every reply that node owes; those on other nodes from the start again */
        if ((rc = ccap_defer_collect(r, r->defer[i].sent_on, ccap_now_ms() + r->conf.command_timeout_ms)) ==
            -ETIMEDOUT)
            return rc;
        i = (size_t)-1;
    }
    rc = run_unsent(r);
    return rc < 0 ? rc : (int)r->n_defer;
}

size_t ccap_redis_deferred(const struct ccap_redis *r)
{
    return r ? r->n_defer : 0;
}
