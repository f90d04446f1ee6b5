# hook_calls.sh -- prints the hooked calls `bench hook` measures on a plain descriptor (bench/bench.c), one a
# line: every export of shim/exports.map a program may call on a descriptor the shim neither counts nor queues
# (closefrom, exec, the resolver, dlopen are not such calls). A+B: a pair (the budget of two calls).
printf '%s\n' setsockopt getsockopt getsockname shutdown epoll_ctl poll ppoll __poll_chk __ppoll_chk select pselect \
    syscall fcntl dup2 dup3 sendto sendmsg sendmmsg dup+close dup+close_range dup+syscall_close dup+fclose \
    epoll_create1+close
