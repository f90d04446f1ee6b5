/* redis_sentinel.c -- finds the master through Redis Sentinel and checks its role. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "redis_int.h"

/* Asks sentinel S for the master's address. 0 and HOST/PORT, -ENOENT when
 * it does not know the master, or -errno. NOAUTH: authenticates with the
 * configured user and password, and asks once more. */
static int ask_sentinel(struct ccap_redis *r, struct ccap_node *s, long long deadline, char *host, size_t hostlen,
                        int *port)
{
    const char *av[3] = { "SENTINEL", "get-master-addr-by-name", r->conf.master };
    redisReply *rep;
    int rc;

    for (int attempt = 0;; attempt++) {
        rc = ccap_node_ensure(r, s, deadline, CCAP_SETUP_SENTINEL | (attempt ? CCAP_SETUP_AUTH : 0));
        if (rc < 0)
            return rc;
        rc = ccap_node_exec(r, s, 3, av, &rep);
        if (rc < 0)
            return rc;
        if (rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "NOAUTH", 6) && !attempt && r->conf.password) {
            freeReplyObject(rep);
            ccap_node_drop(s);
            continue;
        }
        break;
    }
    rc = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_STRING &&
        rep->element[1]->type == REDIS_REPLY_STRING && rep->element[0]->len < hostlen) {
        char *end;
        long p = strtol(rep->element[1]->str, &end, 10);

        snprintf(host, hostlen, "%s", rep->element[0]->str);
        *port = (int)p;
        if (end == rep->element[1]->str || *end || p < 1 || p > CCAP_PORT_MAX) {
            ccap_redis_set_err(r, "redis sentinel %s:%d: master port \"%.16s\" is not a port", s->host, s->port,
                               rep->element[1]->str);
            rc = -EPROTO;
        }
    } else if (rep->type == REDIS_REPLY_NIL) {
        ccap_redis_set_err(r, "redis sentinel %s:%d does not know master \"%s\"", s->host, s->port, r->conf.master);
        rc = -ENOENT;
    } else {
        ccap_redis_set_err(r, "redis sentinel %s:%d: %s", s->host, s->port,
                           rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        rc = -EPROTO;
    }
    freeReplyObject(rep);
    return rc;
}

/* ROLE on the fresh master connection: -EAGAIN when it is not a master
 * (a failover not yet known to the sentinel we asked). A server that does
 * not let us run ROLE (ACL) is taken at the sentinels' word. */
static int check_role(struct ccap_redis *r)
{
    const char *av[1] = { "ROLE" };
    redisReply *rep;
    int rc = ccap_node_exec(r, &r->main, 1, av, &rep);

    if (rc < 0)
        return rc;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 && rep->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(rep->element[0]->str, "master") != 0) {
        ccap_redis_set_err(r, "redis sentinel: %s:%d, named master \"%s\", is a %s", r->main.host, r->main.port,
                           r->conf.master, rep->element[0]->str);
        rc = -EAGAIN;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        ccap_log(CCAP_LOG_DEBUG, "redis sentinel: ROLE refused (%s): trusting the sentinels", rep->str);
    }
    freeReplyObject(rep);
    if (rc < 0)
        ccap_node_drop(&r->main);
    return rc;
}

int ccap_sentinel_connect(struct ccap_redis *r)
{
    long long start = ccap_now_ms();
    long long budget = start + r->conf.connect_timeout_ms + r->conf.command_timeout_ms;
    size_t n = r->conf.n_sentinels;
    char host[CCAP_HOST_MAX], seen[sizeof r->master_seen];
    int port = 0, rc = -ECONNREFUSED;
    bool found = false;

    ccap_node_drop(&r->main);
    /* Each sentinel gets the full connect timeout, but once the budget of
     * one connect plus one command is spent no further sentinel is tried:
     * a call stays bounded even when several sentinels are unreachable. */
    for (size_t k = 0; k < n && !found; k++) {
        size_t i = (r->sentinel_first + k) % n;
        struct ccap_node s;
        long long now = ccap_now_ms();

        if (k > 0 && now >= budget)
            break;
        memset(&s, 0, sizeof s);
        if (ccap_hostport_parse(r->conf.sentinels[i], s.host, sizeof s.host, &s.port) < 0) {
            ccap_redis_set_err(r, "redis sentinel address \"%s\" is not host:port", r->conf.sentinels[i]);
            continue;
        }
        rc = ask_sentinel(r, &s, now + r->conf.connect_timeout_ms, host, sizeof host, &port);
        ccap_node_drop(&s);
        if (rc == 0) {
            r->sentinel_first = i;
            found = true;
        }
    }
    if (!found) {
        if (rc != -ENOENT && rc != -EPROTO) {
            char last[sizeof r->err]; /* the text is R's own error: copied, not read while written */

            snprintf(last, sizeof last, "%s", r->err[0] ? r->err : "none tried");
            ccap_redis_set_err(r, "redis sentinel: no sentinel answered for master \"%s\" (last: %s)",
                               r->conf.master, last);
        }
        return rc == -ETIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED;
    }

    snprintf(seen, sizeof seen, "%s:%d", host, port);
    if (strcmp(seen, r->master_seen) != 0) {
        ccap_log(r->master_seen[0] ? CCAP_LOG_WARN : CCAP_LOG_INFO, "redis sentinel: master \"%s\" is at %s%s%s",
                 r->conf.master, seen, r->master_seen[0] ? ", was " : "", r->master_seen);
        if (r->master_seen[0])
            r->epoch++; /* a failover: callers may act before their next command (ccap_redis_expect_epoch) */
        snprintf(r->master_seen, sizeof r->master_seen, "%s", seen);
    }
    snprintf(r->main.host, sizeof r->main.host, "%s", host);
    r->main.port = port;
    rc = ccap_node_ensure(r, &r->main, ccap_now_ms() + r->conf.connect_timeout_ms,
                          CCAP_SETUP_AUTH | CCAP_SETUP_SELECT);
    if (rc < 0)
        return rc == -ECONNREFUSED || rc == -ETIMEDOUT ? rc : rc == -EACCES ? -EACCES : -EAGAIN;
    return check_role(r);
}
