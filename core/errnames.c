/* errnames.c -- errno names to values and back (for on_timeout and messages). */
#include "config.h"

#include <errno.h>
#include <strings.h>

struct errname {
    const char *name;
    int value;
};

/* One entry a line, as listed: clang-format would pack the table and mangle E. */
/* clang-format off */
#define E(x) {#x, x}
/* Where two names share a value (EAGAIN/EWOULDBLOCK), the first is the one
 * ccap_errno_name returns. */
static const struct errname errnames[] = {
    E(ETIMEDOUT),
    E(ECONNREFUSED),
    E(EAGAIN),
    E(EWOULDBLOCK),
    E(EHOSTUNREACH),
    E(ENETUNREACH),
    E(ECONNRESET),
    E(ECONNABORTED),
    E(EACCES),
    E(EPERM),
    E(EBUSY),
    E(EINTR),
    E(ENOBUFS),
    E(EADDRNOTAVAIL),
    E(ENETDOWN),
    E(EHOSTDOWN),
    E(EADDRINUSE),
    E(EALREADY),
    E(EINPROGRESS),
    E(EISCONN),
    E(ENOTCONN),
    E(ENETRESET),
    E(EPIPE),
    E(ESHUTDOWN),
    E(EPROTO),
    E(EPROTONOSUPPORT),
    E(EPROTOTYPE),
    E(EAFNOSUPPORT),
    E(EOPNOTSUPP),
    E(ENOTSUP),
    E(ENOTSOCK),
    E(EDESTADDRREQ),
    E(EMSGSIZE),
    E(ENOPROTOOPT),
    E(ECANCELED),
    E(EMFILE),
    E(ENFILE),
    E(ENOMEM),
    E(ENOSPC),
    E(EIO),
    E(EINVAL),
    E(EBADF),
    E(EFAULT),
    E(ENOENT),
    E(ENOSYS),
    E(EDQUOT),
    E(ERANGE),
    E(E2BIG),
    E(ECHILD),
    E(EDEADLK),
    E(EEXIST),
    E(EFBIG),
    E(EISDIR),
    E(ENOTDIR),
    E(ENOTTY),
    E(ENXIO),
    E(EROFS),
    E(ESPIPE),
    E(ESRCH),
    E(ETXTBSY),
    E(EXDEV),
    E(ELOOP),
    E(ENAMETOOLONG),
    E(ENOTEMPTY),
    E(ENODEV),
    E(ENOEXEC),
    E(ENOLCK),
    E(EMLINK),
    E(EDOM),
    E(EOVERFLOW),
    E(EILSEQ),
    E(EREMOTEIO),
    E(ETIME),
    E(ENOLINK),
    E(ENONET),
    E(ENOTUNIQ),
    E(EKEYEXPIRED),
    E(EKEYREJECTED),
    E(EKEYREVOKED),
    E(ENOKEY),
    E(EUSERS),
    E(ESTALE),
    E(EBADMSG),
    E(ENOMSG),
    E(ENODATA),
    E(ENOSR),
    E(ENOSTR),
    E(EIDRM),
    E(ENOTRECOVERABLE),
    E(EOWNERDEAD),
    E(ERFKILL),
};
#undef E
/* clang-format on */

int ccap_errno_parse(const char *name)
{
    if (!name)
        return -EINVAL;
    for (size_t i = 0; i < sizeof errnames / sizeof errnames[0]; i++)
        if (!strcasecmp(name, errnames[i].name))
            return errnames[i].value;
    return -EINVAL;
}

const char *ccap_errno_name(int e)
{
    for (size_t i = 0; i < sizeof errnames / sizeof errnames[0]; i++)
        if (errnames[i].value == e)
            return errnames[i].name;
    return "E?";
}

const char *ccap_errno_name_at(size_t i)
{
    return i < sizeof errnames / sizeof errnames[0] ? errnames[i].name : NULL;
}
