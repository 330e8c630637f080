/* How long a thread parked on a futex takes to run again after another thread wakes it, and
 * what the wake costs the waker: the two costs of the simulator's `Profile::wake` and
 * `Profile::unpark` (docs/simulation.md §3, "Parking"). Run it where the profile is fitted
 * (this project's VM: soft-roce-ci/wake-latency.sh builds it and runs it there), with 0, 1 and
 * 2 threads spinning beside it: on a 2-vCPU VM, 1 and 2 leave the woken thread no idle CPU.
 *
 * Usage: wake-latency [SPINNERS] [ROUNDS]
 * Prints the median and 90th percentile of the wake-up latency (from just before the wake
 * call until the woken thread reads the clock) and the median time of the wake call. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int word, stop;
static atomic_long woke_at;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void futex(atomic_int *w, int op, int val) {
    syscall(SYS_futex, w, op, val, NULL, NULL, 0);
}

/* Parks until `word` is 1, notes when it ran, and parks again. */
static void *waiter(void *arg) {
    (void)arg;
    for (;;) {
        while (atomic_load(&word) == 0)
            futex(&word, FUTEX_WAIT_PRIVATE, 0);
        if (atomic_load(&stop))
            return NULL;
        atomic_store(&woke_at, now_ns());
        atomic_store(&word, 0);
    }
}

static void *spinner(void *arg) {
    (void)arg;
    volatile long x = 0;
    while (!atomic_load(&stop))
        x++;
    return NULL;
}

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int spinners = argc > 1 ? atoi(argv[1]) : 0;
    int n = argc > 2 ? atoi(argv[2]) : 2000;
    if (spinners < 0 || spinners > 64 || n < 10) {
        fprintf(stderr, "usage: %s [SPINNERS (0-64)] [ROUNDS (at least 10)]\n", argv[0]);
        return 2;
    }
    long *lat = malloc(n * sizeof *lat), *cost = malloc(n * sizeof *cost);
    pthread_t w, s[64];
    if (!lat || !cost || pthread_create(&w, NULL, waiter, NULL))
        return 1;
    for (int i = 0; i < spinners; i++)
        if (pthread_create(&s[i], NULL, spinner, NULL))
            return 1;
    usleep(100000);
    for (int i = 0; i < n; i++) {
        usleep(200); /* the waiter is parked again */
        atomic_store(&woke_at, 0);
        long t0 = now_ns();
        atomic_store(&word, 1);
        futex(&word, FUTEX_WAKE_PRIVATE, 1);
        cost[i] = now_ns() - t0;
        long t;
        while ((t = atomic_load(&woke_at)) == 0)
            ;
        lat[i] = t - t0;
        while (atomic_load(&word) != 0)
            ;
    }
    qsort(lat, n, sizeof *lat, cmp);
    qsort(cost, n, sizeof *cost, cmp);
    printf("spinners %d: wake-up p50 %.1f us, p90 %.1f us; the wake call p50 %.1f us\n", spinners,
           lat[n / 2] / 1e3, lat[n * 9 / 10] / 1e3, cost[n / 2] / 1e3);
    atomic_store(&stop, 1);
    atomic_store(&word, 1);
    futex(&word, FUTEX_WAKE_PRIVATE, 1);
    pthread_join(w, NULL);
    for (int i = 0; i < spinners; i++)
        pthread_join(s[i], NULL);
    return 0;
}
