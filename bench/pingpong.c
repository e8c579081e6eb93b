/* The cost of handing a cache line between two cores: two threads of one process take turns
 * writing one counter, each waiting to see the other's write; prints the round trip.
 *
 *     gcc -O2 -pthread bench/pingpong.c -o /tmp/pingpong && /tmp/pingpong [round trips]
 *
 * Why it is here: on the 2-core VM the benchmarks run on, two threads sharing data (the cpu
 * pool's workers on one model) ran at two speeds a few seconds to minutes apart, while two
 * processes that share nothing always ran at full speed. This measures what differs: the
 * round trip is ~55-70 ns in the fast state and ~340-400 ns in the slow one (the hypervisor
 * placing the two vCPUs on cores near each other, or far apart). bench/README.md labels
 * model runs with it ("the slow state explained"). Plain C, not Python: a Python loop's own
 * cost would hide a 60 ns round trip.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) atomic_long turn;
static long rounds;

static void *other(void *unused) {
    (void)unused;
    for (long i = 0; i < rounds; i++) {
        while (atomic_load(&turn) != 2 * i + 1) {
        }
        atomic_store(&turn, 2 * i + 2);
    }
    return NULL;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 200000;
    if (rounds <= 0) {
        fprintf(stderr, "pingpong: expected a positive number of round trips, got '%s'\n",
                argv[1]);
        return 2;
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, other, NULL) != 0) {
        fprintf(stderr, "pingpong: cannot start the second thread\n");
        return 1;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < rounds; i++) {
        atomic_store(&turn, 2 * i + 1);
        while (atomic_load(&turn) != 2 * i + 2) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    pthread_join(thread, NULL);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("%.0f ns/roundtrip\n", ns / rounds);
    return 0;
}
