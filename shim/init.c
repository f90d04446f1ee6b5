/* init.c -- the shim's constructor and destructor: cheap in, permits out. */
#include "core.h"
#include "shim.h"

static const struct ccap_core_hooks hooks = {
    .need_heartbeat = ccap_heartbeat_start,
    .fork_child = ccap_heartbeat_forget,
};

/* No threads, no locks, no allocation, no I/O: the configuration is loaded
 * on the first connect() to an Internet address. */
__attribute__((constructor)) static void ccap_shim_init(void)
{
    ccap_core_set_hooks(&hooks);
}

/* exit() and return from main: give back every permit this process holds.
 * _exit(), abort() and SIGKILL leave them to lease expiry. */
__attribute__((destructor)) static void ccap_shim_fini(void)
{
    ccap_guard++;
    ccap_heartbeat_stop();
    ccap_core_shutdown();
    ccap_guard--;
}
