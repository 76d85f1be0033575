/* The pickup bench's small static agent (benches/pipeline.rs --c-agent): prints the
 * wall-clock instant its main() began, in nanoseconds, then copies stdin to stdout
 * like cat, so that the agent's own start (no dynamic loader, no runtime) is not what
 * the pickup measures. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "%lld%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    if (write(1, buf, n) != n) return 1;
    ssize_t r;
    while ((r = read(0, buf, sizeof buf)) > 0)
        if (write(1, buf, r) != r) return 1;
    return r < 0;
}
