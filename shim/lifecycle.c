/* lifecycle.c -- the one place the shim routes a process's life to the runtime: load, fork, exec, exit. */
#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include "boot.h"
#include "env.h"
#include "fileset.h"
#include "handoff.h"
#include "log.h"
#include "queued.h"
#include "runtime.h"
#include "shim.h"
#include "tls.h"

/* After fork, in the child, at its place in the runtime's one order
 * (runtime/lifecycle.c): the shim's threads did not survive the fork. */
static void fork_child(void)
{
    ccap_heartbeat_forget();
    ccap_watch_forget();
    GUARDED(ccap_q_fork_child()); /* its dup3 and close are the shim's own */
}

/* The signals a hold blocks: all but the synchronous ones (blocked, a
 * fault's would kill the process at once) -- glibc keeps its own
 * (cancellation, setxid) out of any mask. */
static sigset_t held_set(void)
{
    static const int sync_sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT };
    sigset_t s;

    sigfillset(&s);
    for (size_t i = 0; i < sizeof sync_sigs / sizeof sync_sigs[0]; i++)
        sigdelset(&s, sync_sigs[i]);
    return s;
}

__thread int ccap_sig_on __attribute__((tls_model("initial-exec")));
static __thread sigset_t sig_saved; /* the program's mask while ccap_sig_on */

void ccap_shim_sig_block(void)
{
    sigset_t s = held_set();
    if (!ccap_sig_on && pthread_sigmask(SIG_BLOCK, &s, &sig_saved) == 0)
        ccap_sig_on = 1;
}

void ccap_shim_hold_signals(void)
{
    if (ccap_prog_cancel >= 0 && ccap_guard)
        ccap_shim_sig_block();
}

void ccap_shim_release_signals(void)
{
    ccap_sig_on = 0;
    pthread_sigmask(SIG_SETMASK, &sig_saved, NULL);
}

void ccap_shim_sig_push(struct ccap_shim_frame *f)
{
    f->saved = sig_saved;
    ccap_sig_on = 0;
}

void ccap_shim_sig_pop(const struct ccap_shim_frame *f)
{
    sig_saved = f->saved;
    ccap_sig_on = 1;
}

/* The thread is the program's until ccap_shim_inside -- no guard (a signal
 * handler's connect or close meanwhile is the program's, and the sleep
 * holds nothing it could trip on), its cancellation state its own (a cancel
 * acts in the sleep, the wait's cleanup handler undoing it), its mask its
 * own, last (a handler held back so far runs now, the thread the
 * program's). The shim's own threads: unchanged. */
int ccap_shim_outside(void)
{
    int g = ccap_guard;

    if (ccap_prog_cancel < 0)
        return -1;
    ccap_guard = 0;
    pthread_setcancelstate(ccap_prog_cancel, NULL);
    if (ccap_sig_on)
        pthread_sigmask(SIG_SETMASK, &sig_saved, NULL);
    return g;
}

/* The mask first: no handler runs once the thread is the shim's again. The
 * mask found is kept as the program's: in a wait's cleanup run by a
 * handler's siglongjmp, the handler's, which ccap_shim_outside puts back. */
void ccap_shim_inside(int back)
{
    if (back < 0)
        return;
    if (ccap_sig_on) {
        sigset_t s = held_set();
        pthread_sigmask(SIG_BLOCK, &s, &sig_saved);
    }
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    ccap_guard = back;
}

static const struct ccap_rt_hooks hooks = {
    .need_heartbeat = ccap_heartbeat_start,
    .permit_taken = ccap_later_heartbeat,
    .fork_child = fork_child,
    .need_watch = ccap_later_watch,
    .waiting = ccap_watch_start,
    .spawn = ccap_shim_spawn_guarded,
    .outside = ccap_shim_outside,
    .inside = ccap_shim_inside,
    .hold_signals = ccap_shim_hold_signals,
};

/* The shim's own file, when conncap run handed a configuration over (the
 * next image must preload a library of that name to be handed it too). */
static char self[PATH_MAX];

char *const *ccap_shim_exec_begin(char *const *envp, struct ccap_exec *x)
{
    char *const *env;
    GUARDED(ccap_q_exec_pre(); env = ccap_handoff_exec_pre(envp, x);
            x->config_fd = ccap_boot_exec_pre(env, self[0] ? self : NULL));
    GUARDED(ccap_rt_log_flush()); /* this image's last word, if the exec succeeds */
    return env;
}

char *const *ccap_shim_exec_e2big(struct ccap_exec *x)
{
    return ccap_handoff_exec_e2big(x);
}

void ccap_shim_exec_end(struct ccap_exec *x)
{
    GUARDED(ccap_boot_exec_post(x->config_fd); ccap_handoff_exec_post(x));
}

/* At exit(), before OpenSSL may be cleaned up (see ccap_tls_set_exit_hook):
 * the permits go back while TLS to Redis still works. */
static void exit_tls(void)
{
    GUARDED(ccap_heartbeat_stop(); ccap_rt_shutdown());
}

/* Before main, before the program can drop privileges or change its
 * environment: every CONNCAP_* variable is copied (a program that clears or
 * rewrites its environment, as nginx's workers get it, still finds its
 * configuration), and the configuration is read into memory -- the file,
 * and when it names them its @includes, password_file and TLS files, or
 * conncap run's hand-over -- so that a worker that runs as nobody later is
 * capped all the same (runtime/boot.c). That is I/O and allocation bounded
 * by the configuration's size; still no thread, no lock, no log line (a
 * failure is said at the first connect), nothing on stdout. The
 * configuration is put in force by the first connect() to an Internet
 * address. Permits handed over by the image that exec'd us are only noted
 * here and adopted at the first interposed call of any kind, or at exit. */
__attribute__((constructor)) static void ccap_shim_init(void)
{
    Dl_info di;
    ccap_env_capture();
    ccap_rt_set_hooks(&hooks);
    ccap_tls_set_exit_hook(exit_tls);
    ccap_handoff_record();
    if (ccap_env_get(CCAP_CONFIG_FD_ENV) && dladdr((void *)ccap_shim_init, &di) && di.dli_fname)
        snprintf(self, sizeof self, "%s", di.dli_fname);
    GUARDED(ccap_rt_boot()); /* its close() calls are the shim's own */
}

/* The program's main, run by our wrapper. */
static int (*program_main)(int, char **, char **);

static int main_after_adoption(int argc, char **argv, char **envp)
{
    ccap_shim_adopt();
    return program_main(argc, argv, envp);
}

/* _start calls this once, after the preloaded libraries' constructors. When
 * permits were handed over across exec, they are adopted (and the heartbeat
 * started) just before main, after every constructor has run: a program
 * that never makes another interposed call still has them renewed. With
 * nothing to adopt, the call passes straight through. */
__attribute__((visibility("default"))) int __libc_start_main(int (*main)(int, char **, char **), int argc,
                                                             char **argv, void (*init)(void), void (*fini)(void),
                                                             void (*rtld_fini)(void), void *stack_end)
{
    if (ccap_handoff_waiting()) {
        program_main = main;
        main = main_after_adoption;
    }
    return CCAP_REAL(__libc_start_main)(main, argc, argv, init, fini, rtld_fini, stack_end);
}

/* exit() and return from main: give back every permit this process holds,
 * and report the log lines the rate limit held back. _exit(), abort() and
 * SIGKILL leave the permits to lease expiry. */
__attribute__((destructor)) static void ccap_shim_fini(void)
{
    GUARDED(ccap_heartbeat_stop(); ccap_watch_stop(); ccap_rt_shutdown(); ccap_rt_log_flush());
}
