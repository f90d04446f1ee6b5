/* redis_cluster.c -- Redis Cluster: the slot map (CLUSTER SLOTS), node connections, MOVED/ASK. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "redis_int.h"

#define CCAP_CLUSTER_MAX_NODES 1024
#define CCAP_CLUSTER_CONVERGE_MS 5000 /* a slot's owner may flip back and forth this long after a failover */

struct ccap_node *ccap_cluster_node_at(struct ccap_redis *r, const char *host, int port)
{
    struct ccap_node *n;

    for (size_t i = 0; i < r->n_nodes; i++)
        if (r->nodes[i]->port == port && strcmp(r->nodes[i]->host, host) == 0)
            return r->nodes[i];
    if (r->n_nodes >= CCAP_CLUSTER_MAX_NODES || strlen(host) >= CCAP_HOST_MAX)
        return NULL;
    if (r->n_nodes == r->cap_nodes) {
        size_t cap = r->cap_nodes ? r->cap_nodes * 2 : 8;
        struct ccap_node **v = realloc(r->nodes, cap * sizeof *v);

        if (!v)
            return NULL;
        r->nodes = v;
        r->cap_nodes = cap;
    }
    n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    r->nodes[r->n_nodes++] = n;
    return n;
}

static int node_index(const struct ccap_redis *r, const struct ccap_node *n)
{
    for (size_t i = 0; i < r->n_nodes; i++)
        if (r->nodes[i] == n)
            return (int)i;
    return -1;
}

/* The node at entry M (an address array {host, port, id, ...}) of a CLUSTER
 * SLOTS reply got from FROM: an empty host (or "?") means FROM's. NULL when
 * M is malformed (*BAD) or out of memory. */
static struct ccap_node *slots_node(struct ccap_redis *r, const struct ccap_node *from, const redisReply *m,
                                    bool *bad)
{
    const char *host;

    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING ||
        m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer < 1 ||
        m->element[1]->integer > CCAP_PORT_MAX) {
        *bad = true;
        return NULL;
    }
    host = m->element[0]->str;
    if (!host[0] || !strcmp(host, "?"))
        host = from->host;
    return ccap_cluster_node_at(r, host, (int)m->element[1]->integer);
}

/* Fills MAP from a CLUSTER SLOTS reply got from node FROM: each entry is
 * {start, end, {host, port, id, ...}, replicas...}; the first address is
 * the master's. Each replica's replica_next names its master. */
static int parse_slots(struct ccap_redis *r, const struct ccap_node *from, const redisReply *rep, uint16_t *map)
{
    if (rep->type != REDIS_REPLY_ARRAY)
        return -EPROTO;
    for (size_t i = 0; i < r->n_nodes; i++)
        r->nodes[i]->replica_next = 0;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        struct ccap_node *n;
        long long lo, hi;
        bool bad = false;
        int idx;

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY)
            return -EPROTO;
        lo = e->element[0]->integer;
        hi = e->element[1]->integer;
        if (lo < 0 || hi >= CCAP_CLUSTER_SLOTS || lo > hi)
            return -EPROTO;
        n = slots_node(r, from, e->element[2], &bad);
        if (!n)
            return bad ? -EPROTO : -ENOMEM;
        idx = node_index(r, n);
        for (long long s = lo; s <= hi; s++)
            map[s] = (uint16_t)(idx + 1);
        for (size_t k = 3; k < e->elements; k++) {
            struct ccap_node *rn = slots_node(r, from, e->element[k], &bad);

            if (!rn && !bad)
                return -ENOMEM;
            if (rn && rn != n)
                rn->replica_next = idx + 1;
            bad = false; /* a replica we cannot read is only not known as one */
        }
    }
    return 0;
}

bool ccap_cluster_note_move(struct ccap_redis *r, int slot, int old, int nw, const bool *was_master)
{
    if (!old || !nw || old == nw || nw > (int)r->n_nodes)
        return false;
    if (r->nodes[nw - 1]->replica_of != old && was_master[nw - 1])
        return false; /* a resharding between masters: no data was lost */
    if (!r->slot_epoch && !(r->slot_epoch = calloc(3 * CCAP_CLUSTER_SLOTS, sizeof *r->slot_epoch)))
        return false; /* out of memory: this failover goes unseen, as before epochs */
    uint16_t *from = r->slot_epoch + CCAP_CLUSTER_SLOTS, *to = from + CCAP_CLUSTER_SLOTS;
    /* While the cluster converges, nodes that have not heard of the
     * failover yet name the old master again, and the new one redirects
     * back: one failover, counted once (the slot's last one: its source and
     * target, and when the target took over) */
    if (to[slot] == nw || (from[slot] == nw && to[slot] == old &&
                           ccap_now_ms() - r->nodes[old - 1]->took_over_ms < CCAP_CLUSTER_CONVERGE_MS))
        return false;
    from[slot] = (uint16_t)old;
    to[slot] = (uint16_t)nw;
    r->nodes[nw - 1]->took_over_ms = ccap_now_ms();
    r->slot_epoch[slot]++;
    r->epoch++;
    return true;
}

/* Which nodes own a slot in the map in force (N_NODES entries, caller frees),
 * or NULL when out of memory. */
static bool *masters_of_map(const struct ccap_redis *r)
{
    bool *m = calloc(r->n_nodes + 1, sizeof *m);

    for (size_t s = 0; m && r->slots && s < CCAP_CLUSTER_SLOTS; s++)
        if (r->slots[s] && r->slots[s] <= r->n_nodes)
            m[r->slots[s] - 1] = true;
    return m;
}

/* Counts the failovers among the moves from the map in force to MAP, and
 * logs them once. */
static void note_moves(struct ccap_redis *r, const uint16_t *map)
{
    bool *was_master = masters_of_map(r);
    int moved = 0, first = -1;

    for (int sl = 0; was_master && r->slots && sl < CCAP_CLUSTER_SLOTS; sl++)
        if (r->slots[sl] != map[sl] && ccap_cluster_note_move(r, sl, r->slots[sl], map[sl], was_master) && !moved++)
            first = sl;
    if (moved)
        ccap_log(CCAP_LOG_WARN, "redis cluster: %d slot(s) failed over (slot %d from %s:%d to %s:%d)", moved, first,
                 r->nodes[r->slots[first] - 1]->host, r->nodes[r->slots[first] - 1]->port,
                 r->nodes[map[first] - 1]->host, r->nodes[map[first] - 1]->port);
    free(was_master);
}

/* CLUSTER SLOTS from the first node that answers (connected ones first,
 * then the others and the seeds), within DEADLINE. */
static int refresh_slots(struct ccap_redis *r, long long deadline)
{
    const char *av[2] = { "CLUSTER", "SLOTS" };
    uint16_t *map = calloc(CCAP_CLUSTER_SLOTS, sizeof *map);
    int rc = -ECONNREFUSED;

    if (!map)
        return -ENOMEM;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < r->n_nodes; i++) {
            struct ccap_node *n = r->nodes[i];
            redisReply *rep;

            if ((pass == 0) != (n->ctx != NULL))
                continue;
            if (pass == 1 && ccap_now_ms() >= deadline)
                break;
            if ((rc = ccap_node_ensure(r, n, deadline, CCAP_SETUP_AUTH)) < 0)
                continue;
            if ((rc = ccap_node_exec(r, n, 2, av, &rep)) < 0)
                continue;
            if (rep->type == REDIS_REPLY_ERROR) {
                ccap_redis_set_err(r, "redis cluster %s:%d: CLUSTER SLOTS: %s", n->host, n->port, rep->str);
                rc = -EPROTO;
            } else if ((rc = parse_slots(r, n, rep, map)) == -EPROTO) {
                ccap_redis_set_err(r, "redis cluster %s:%d: CLUSTER SLOTS: unexpected reply", n->host, n->port);
            }
            freeReplyObject(rep);
            if (rc == 0) {
                note_moves(r, map); /* judged with the roles of the map before */
                for (size_t k = 0; k < r->n_nodes; k++)
                    r->nodes[k]->replica_of = r->nodes[k]->replica_next;
                free(r->slots);
                r->slots = map;
                r->slots_stale = false;
                return 0;
            }
            if (rc == -ENOMEM)
                break;
        }
    }
    free(map);
    return rc == -EPROTO ? -EIO : rc;
}

/* Closes connections to nodes the map no longer names (a node removed
 * or demoted): they would only hold descriptors. Seeds stay known. */
static void drop_unused(struct ccap_redis *r)
{
    for (size_t i = 0; i < r->n_nodes; i++) {
        bool used = false;

        if (!r->nodes[i]->ctx)
            continue;
        for (size_t s = 0; s < CCAP_CLUSTER_SLOTS && !used; s++)
            used = r->slots[s] == i + 1;
        if (!used)
            ccap_node_drop(r->nodes[i]);
    }
}

int ccap_cluster_node(struct ccap_redis *r, int slot, struct ccap_node **out)
{
    long long deadline = ccap_now_ms() + r->conf.connect_timeout_ms + r->conf.command_timeout_ms;
    bool refreshed = false;
    int rc;

    for (;;) {
        struct ccap_node *n = NULL;

        if (!r->slots || r->slots_stale) {
            rc = refresh_slots(r, deadline);
            if (rc < 0 && !r->slots)
                return rc;
            if (rc == 0) {
                refreshed = true;
                drop_unused(r);
            }
        }
        if (slot >= 0 && r->slots[slot])
            n = r->nodes[r->slots[slot] - 1];
        for (size_t i = 0; !n && i < r->n_nodes; i++) /* no key, or an unserved slot: any node */
            if (r->nodes[i]->ctx)
                n = r->nodes[i];
        for (size_t i = 0; !n && i < CCAP_CLUSTER_SLOTS; i++)
            if (r->slots[i])
                n = r->nodes[r->slots[i] - 1];
        if (!n)
            n = r->nodes[0];
        rc = ccap_node_ensure(r, n, ccap_now_ms() + r->conf.connect_timeout_ms, CCAP_SETUP_AUTH);
        if (rc >= 0) {
            *out = n;
            return rc;
        }
        /* The owner is gone (a failover may have promoted a replica): ask
         * the others for the map once, then give up for this call. */
        r->slots_stale = true;
        if (refreshed || ccap_now_ms() >= deadline)
            return rc;
        refreshed = true;
    }
}

int ccap_cluster_redirect(struct ccap_redis *r, struct ccap_node *from, const char *text, struct ccap_node **out,
                          bool *ask)
{
    char kind[8], addr[CCAP_HOST_MAX + 8], host[CCAP_HOST_MAX];
    struct ccap_node *n;
    int slot, port, rc;

    if (sscanf(text, "%7s %d %263s", kind, &slot, addr) != 3 || slot < 0 || slot >= CCAP_CLUSTER_SLOTS) {
        ccap_redis_set_err(r, "redis cluster: bad redirect \"%s\"", text);
        return -EPROTO;
    }
    if (addr[0] == ':') { /* no endpoint known: the same host, another port */
        snprintf(host, sizeof host, "%s", from->host);
        port = atoi(addr + 1);
        if (port < 1 || port > CCAP_PORT_MAX) {
            ccap_redis_set_err(r, "redis cluster: bad redirect \"%s\"", text);
            return -EPROTO;
        }
    } else if (ccap_hostport_parse(addr, host, sizeof host, &port) < 0) {
        ccap_redis_set_err(r, "redis cluster: bad redirect \"%s\"", text);
        return -EPROTO;
    }
    n = ccap_cluster_node_at(r, host, port);
    if (!n) {
        ccap_redis_set_err(r, "redis cluster: too many nodes or out of memory");
        return -ENOMEM;
    }
    *ask = strcmp(kind, "ASK") == 0;
    ccap_log(CCAP_LOG_DEBUG, "redis cluster: %s slot %d to %s:%d", kind, slot, host, port);
    if (!*ask && r->slots) {
        /* Remember the new owner now; reload the whole map before the next
         * call, since a MOVED usually means a resharding or a failover. */
        int nw = node_index(r, n) + 1;
        bool *was_master = masters_of_map(r);

        if (was_master && ccap_cluster_note_move(r, slot, r->slots[slot], nw, was_master))
            ccap_log(CCAP_LOG_WARN, "redis cluster: slot %d failed over to %s:%d", slot, host, port);
        free(was_master);
        r->slots[slot] = (uint16_t)nw;
        r->slots_stale = true;
    }
    rc = ccap_node_ensure(r, n, ccap_now_ms() + r->conf.connect_timeout_ms, CCAP_SETUP_AUTH);
    if (rc < 0)
        return rc;
    *out = n;
    return 0;
}

void ccap_cluster_free(struct ccap_redis *r)
{
    for (size_t i = 0; i < r->n_nodes; i++) {
        ccap_node_drop(r->nodes[i]);
        free(r->nodes[i]);
    }
    free(r->nodes);
    free(r->slots);
    free(r->slot_epoch);
    r->nodes = NULL;
    r->slots = NULL;
    r->slot_epoch = NULL;
    r->n_nodes = r->cap_nodes = 0;
}
