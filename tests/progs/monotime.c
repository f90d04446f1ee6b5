/* monotime.c -- prints CLOCK_MONOTONIC in ms (3 decimals): a timestamp the tests compare with hold's. */
#include <stdio.h>
#include <time.h>

int main(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("%.3f\n", ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6);
    return 0;
}
