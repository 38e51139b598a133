/*
 * pool.c — the library's persistent worker threads (ctx->threads).
 *
 * A training step commits dozens of ops of a few hundred microseconds
 * each: creating and joining a thread per op would cost a good part of
 * what the second thread saves.  The workers are created once, on first
 * use, and wait on a condition variable between jobs.  A job is a
 * function called as fn(arg, t, T) for t = 0 .. T-1, part 0 in the
 * calling thread; what a part computes must depend on (t, T) only, never
 * on which thread runs it or when, so that results never depend on the
 * scheduling (the callers split rows or chunks and merge in part order).
 *
 * Parts are claimed, not assigned: the caller, its own part done, runs
 * whatever part no worker has taken yet, so a worker that the system has
 * not scheduled (a machine busier than its cores) delays nothing; the
 * caller waits only for parts already running.
 *
 * A worker that finishes a job spins a little (EMU_POOL_SPIN_NS) before it
 * sleeps on the condition variable: a training step's jobs come tens of
 * microseconds apart, and a sleeping worker costs the caller a futex wake
 * and the worker a reschedule (on a VM, often longer than a part), during
 * which the caller ends up running every part itself.  The caller spins
 * the same while the last parts finish.
 *
 * One job runs at a time.  A caller that finds the pool busy (another
 * context on another thread of the application, or a part calling back
 * into the pool) runs every part itself, in order: same results, no
 * waiting, no deadlock.  After fork() the child has none of the parent's
 * threads: a pthread_atfork handler starts the pool afresh there (asking
 * getpid() a job instead cost a system call, 1.3 us on this VM, at every
 * job of a step).
 *
 * EMU_POOL_TRACE=FILE records every job (one-part ones too): its parts'
 * times and threads and the caller's wait, written to FILE at exit for
 * bench/pool_trace.py, which says where a run on several threads loses
 * to one.  Unset, it costs a test of one flag a job.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_atfork */

#include "atomic_file.h"
#include "internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a worker polls for the next job, and the caller for the last
 * parts, before sleeping (nanoseconds). */
enum { EMU_POOL_SPIN_NS = 200 * 1000 };

enum { POOL_MAX = EMU_POOL_MAX };

typedef struct emu_pool {
    pthread_mutex_t lock;       /* guards everything below               */
    pthread_cond_t wake;        /* a new job for the workers             */
    pthread_cond_t done;        /* the last part of a job finished       */
    int nworkers;               /* threads started (parts 1..nworkers)   */
    uint64_t gen;               /* job number: a worker runs each once   */
    emu_pool_fn fn;
    void *arg;
    int parts;                  /* T of the current job                  */
    int next;                   /* the next part nobody has claimed      */
    int pending;                /* parts 1..T-1 not finished yet         */
    struct trace_job *trace;    /* the job's record (EMU_POOL_TRACE)     */
} emu_pool;

static emu_pool pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static bool pool_ok;
/* The pool is one job at a time: this flag, taken with a trylock-like
 * test under `lock`, says a job (or a caller running parts itself) owns
 * it. */
static bool pool_busy;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One poll of a spin: whether it has gone on for EMU_POOL_SPIN_NS, the
 * clock read every 256 polls (i counts them from 1; *t0 is the first
 * reading, 0 before it). */
static bool spin_expired(unsigned i, uint64_t *t0)
{
    CPU_RELAX();
    if ((i & 255) != 0)
        return false;
    const uint64_t t = now_ns();
    if (!*t0) {
        *t0 = t;
        return false;
    }
    return t - *t0 > EMU_POOL_SPIN_NS;
}

/* Polls *v (read atomically, without the lock) until it differs from
 * `while_eq` or EMU_POOL_SPIN_NS have passed; called without the lock. */
static void spin_while_u64(const uint64_t *v, uint64_t while_eq)
{
    uint64_t t0 = 0;
    for (unsigned i = 1; __atomic_load_n(v, __ATOMIC_ACQUIRE) == while_eq &&
                         !spin_expired(i, &t0);
         i++)
        ;
}

/* The same until *v is zero. */
static void spin_while_nonzero(const int *v)
{
    uint64_t t0 = 0;
    for (unsigned i = 1;
         __atomic_load_n(v, __ATOMIC_ACQUIRE) != 0 && !spin_expired(i, &t0); i++)
        ;
}

/* ---- the trace (EMU_POOL_TRACE) ------------------------------------------ */

/* Parts recorded a job: a job of more parts keeps its first ones. */
enum { TRACE_PARTS = 8, TRACE_BLOCK = 4096 };

typedef struct trace_part {
    uint64_t t0, t1;  /* monotonic clock, ns                        */
    uint64_t cpu;     /* the running thread's CPU time in the part  */
    int who;          /* 0 the thread that posted the job, k worker k */
} trace_part;

typedef struct trace_job {
    uintptr_t fn, site;          /* the part function, emu_pool_run's caller */
    int T, inline_;              /* parts; run by the caller alone            */
    uint64_t start, own_end, end; /* posted, the caller's parts done, over   */
    uint64_t cpu_start, cpu_end; /* the caller's CPU clock at start and end   */
    trace_part part[TRACE_PARTS];
} trace_job;

typedef struct trace_block {
    struct trace_block *next;
    size_t n;
    trace_job job[TRACE_BLOCK];
} trace_block;

/* 0 not read yet, 1 off, 2 on.  Blocks never move, so a part writes its
 * record while other jobs (nested ones) are appended. */
static int trace_state;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_block *trace_head, *trace_tail;
static const char *trace_path;
static _Thread_local int trace_who;

/* Whether the trace is known to be off (read without the lock). */
static bool trace_off(void)
{
    return __atomic_load_n(&trace_state, __ATOMIC_RELAXED) == 1;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The records, as bench/pool_trace.py reads them (emu_write_atomic's
 * callback: 0, or non-zero on a write error). */
static int trace_print(FILE *f, const void *arg)
{
    (void)arg;
    fprintf(f, "# emu pool trace 1: anchor emu_pool_run %#llx\n",
            (unsigned long long)(uintptr_t)emu_pool_run);
    for (const trace_block *b = trace_head; b; b = b->next)
        for (size_t i = 0; i < b->n; i++) {
            const trace_job *j = &b->job[i];
            fprintf(f, "J %#llx %#llx %d %d %llu %llu %llu %llu %llu\n",
                    (unsigned long long)j->fn, (unsigned long long)j->site,
                    j->T, j->inline_, (unsigned long long)j->start,
                    (unsigned long long)j->own_end,
                    (unsigned long long)j->end,
                    (unsigned long long)j->cpu_start,
                    (unsigned long long)j->cpu_end);
            for (int t = 0; t < j->T && t < TRACE_PARTS; t++)
                fprintf(f, "P %d %llu %llu %llu\n", j->part[t].who,
                        (unsigned long long)j->part[t].t0,
                        (unsigned long long)j->part[t].t1,
                        (unsigned long long)j->part[t].cpu);
        }
    return ferror(f);
}

/* At exit: the trace written as every result of the library is (whole or
 * not at all; a device or FIFO written in place), or a message saying
 * why not. */
static void trace_write(void)
{
    pthread_mutex_lock(&trace_lock);
    emu_error e;
    if (emu_write_atomic(trace_path, trace_print, NULL, &e))
        fprintf(stderr, "libemu: EMU_POOL_TRACE: cannot write %s: %s\n",
                e.where, e.message);
    pthread_mutex_unlock(&trace_lock);
}

static void trace_init(void)
{
    pthread_mutex_lock(&trace_lock);
    if (!trace_state) {
        trace_path = getenv("EMU_POOL_TRACE");
        __atomic_store_n(&trace_state,
                         trace_path && *trace_path && atexit(trace_write) == 0
                             ? 2 : 1,
                         __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&trace_lock);
}

/* A new job's record, its start taken; NULL when the trace is off (or
 * out of memory). */
static trace_job *trace_begin(emu_pool_fn fn, void *site, int T, int inline_)
{
    if (!__atomic_load_n(&trace_state, __ATOMIC_RELAXED))
        trace_init();
    if (trace_off())
        return NULL;
    pthread_mutex_lock(&trace_lock);
    if (!trace_tail || trace_tail->n == TRACE_BLOCK) {
        trace_block *b = calloc(1, sizeof *b);
        if (!b) {
            pthread_mutex_unlock(&trace_lock);
            return NULL;
        }
        if (trace_tail)
            trace_tail->next = b;
        else
            trace_head = b;
        trace_tail = b;
    }
    trace_job *j = &trace_tail->job[trace_tail->n++];
    pthread_mutex_unlock(&trace_lock);
    j->fn = (uintptr_t)fn;
    j->site = (uintptr_t)site;
    j->T = T;
    j->inline_ = inline_;
    j->cpu_start = thread_cpu_ns();
    j->start = now_ns();
    return j;
}

static void trace_end(trace_job *j)
{
    j->end = now_ns();
    j->cpu_end = thread_cpu_ns();
    if (!j->own_end)
        j->own_end = j->end;
}

/* fn(arg, t, T), recorded in j if there is one. */
static void run_part(trace_job *j, emu_pool_fn fn, void *arg, int t, int T)
{
    if (!j) {
        fn(arg, t, T);
        return;
    }
    const uint64_t c0 = thread_cpu_ns(), t0 = now_ns();
    fn(arg, t, T);
    if (t < TRACE_PARTS) {
        trace_part *p = &j->part[t];
        p->t1 = now_ns();
        p->cpu = thread_cpu_ns() - c0;
        p->t0 = t0;
        p->who = trace_who;
    }
}

/* Runs unclaimed parts of the current job until none is left; called and
 * returning with the lock held.  The job cannot end (nor another begin)
 * while a part claimed here is unfinished, so what is read under the lock
 * stays the job's. */
static void run_claimed(void)
{
    while (pool.next < pool.parts) {
        const int part = pool.next++;
        emu_pool_fn fn = pool.fn;
        void *arg = pool.arg;
        const int T = pool.parts;
        trace_job *j = pool.trace;
        pthread_mutex_unlock(&pool.lock);
        run_part(j, fn, arg, part, T);
        pthread_mutex_lock(&pool.lock);
        if (__atomic_sub_fetch(&pool.pending, 1, __ATOMIC_RELEASE) == 0)
            pthread_cond_signal(&pool.done);
    }
}

static void *worker_main(void *p)
{
    trace_who = (int)(intptr_t)p;
    EMU_HOSTFP_GUARD; /* a new thread's state is the platform's choice */
    uint64_t seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        if (pool.gen == seen) {
            pthread_mutex_unlock(&pool.lock);
            spin_while_u64(&pool.gen, seen);
            pthread_mutex_lock(&pool.lock);
        }
        while (pool.gen == seen)
            pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.gen;
        run_claimed();
    }
    return NULL;
}

static bool pool_sync_init(void)
{
    return pthread_mutex_init(&pool.lock, NULL) == 0 &&
           pthread_cond_init(&pool.wake, NULL) == 0 &&
           pthread_cond_init(&pool.done, NULL) == 0;
}

/* In a forked child: only the forking thread runs there, so no worker
 * counted exists and no job is under way; the lock and conditions, as
 * the parent's other threads left them, are made anew. */
static void pool_after_fork(void)
{
    pool_ok = pool_sync_init();
    pool.nworkers = 0;
    pool_busy = false;
}

static void pool_init(void)
{
    pool_ok = pool_sync_init() &&
              pthread_atfork(NULL, NULL, pool_after_fork) == 0;
}

/* Starts workers until parts 1..T-1 could each have one (under the
 * lock); returns how many threads, the caller's included, can run parts
 * (T or fewer). */
static int pool_grow(int T)
{
    while (pool.nworkers < T - 1) {
        pthread_t tid;
        if (pthread_create(&tid, NULL, worker_main,
                           (void *)(intptr_t)(pool.nworkers + 1)) != 0)
            break;
        pthread_detach(tid);
        pool.nworkers++;
    }
    return pool.nworkers + 1 < T ? pool.nworkers + 1 : T;
}

static void run_inline(emu_pool_fn fn, void *arg, int T, void *site)
{
    trace_job *j = trace_off() ? NULL : trace_begin(fn, site, T, 1);
    for (int t = 0; t < T; t++)
        run_part(j, fn, arg, t, T);
    if (j)
        trace_end(j);
}

void emu_pool_run(int T, emu_pool_fn fn, void *arg)
{
    void *site = __builtin_return_address(0);
    if (T > POOL_MAX)
        T = POOL_MAX;
    if (T <= 1) {
        if (trace_off())
            fn(arg, 0, 1);
        else
            run_inline(fn, arg, 1, site);
        return;
    }
    pthread_once(&pool_once, pool_init);
    if (!pool_ok) {
        run_inline(fn, arg, T, site);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    if (pool_busy) {
        pthread_mutex_unlock(&pool.lock);
        run_inline(fn, arg, T, site);
        return;
    }
    /* With fewer threads than parts, the parts are still what they are
     * (the results depend on them alone), claimed by fewer hands. */
    if (pool_grow(T) < 2) {
        pthread_mutex_unlock(&pool.lock);
        run_inline(fn, arg, T, site);
        return;
    }
    pool_busy = true;
    trace_job *j = trace_off() ? NULL : trace_begin(fn, site, T, 0);
    pool.trace = j;
    pool.fn = fn;
    pool.arg = arg;
    pool.parts = T;
    pool.next = 1;
    pool.pending = T - 1;
    __atomic_add_fetch(&pool.gen, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_part(j, fn, arg, 0, T);

    pthread_mutex_lock(&pool.lock);
    run_claimed();
    if (j)
        j->own_end = now_ns();
    if (pool.pending > 0) {
        pthread_mutex_unlock(&pool.lock);
        spin_while_nonzero(&pool.pending);
        pthread_mutex_lock(&pool.lock);
    }
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    if (j)
        trace_end(j);
    pool.trace = NULL;
    pool_busy = false;
    pthread_mutex_unlock(&pool.lock);
}

/* ---- a copy in parts ----------------------------------------------------- */

typedef struct pool_copy {
    char *dst;
    const char *src;
    size_t bytes;
} pool_copy;

static void copy_part(void *p, int t, int T)
{
    const pool_copy *c = p;
    /* part boundaries on 64-byte lines: no line written by two threads */
    const size_t lines = (c->bytes + 63) / 64;
    size_t b0 = lines * (size_t)t / (size_t)T * 64;
    size_t b1 = lines * (size_t)(t + 1) / (size_t)T * 64;
    if (b1 > c->bytes)
        b1 = c->bytes;
    if (b0 < b1)
        memcpy(c->dst + b0, c->src + b0, b1 - b0);
}

int emu_pool_parts(int threads, size_t work, size_t min_part)
{
    size_t T = threads < 1 ? 1 : (size_t)threads;
    if (T > EMU_POOL_MAX)
        T = EMU_POOL_MAX;
    if (T > work / min_part)
        T = work / min_part;
    return T < 1 ? 1 : (int)T;
}

void emu_pool_memcpy(int T, void *dst, const void *src, size_t bytes)
{
    T = emu_pool_parts(T, bytes, EMU_POOL_COPY_MIN);
    if (T <= 1) {
        if (bytes)
            memcpy(dst, src, bytes);
        return;
    }
    pool_copy c = { dst, src, bytes };
    emu_pool_run(T, copy_part, &c);
}
