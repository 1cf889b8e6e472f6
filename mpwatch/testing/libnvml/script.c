/* TEST-ONLY: reads the scenario script of the stand-in libnvidia-ml.so.1, and resolves the
 * scenario's pid names against /proc. Runs in whichever thread calls nvmlInit / a process query.
 *
 * The script is a JSON scenario (testing.nvml's format) turned into lines by
 * testing.libnvml.script, so no JSON parser is needed here. One record a line, fields split by
 * tabs, after a first line "mpwatch-nvml-stand-in 1":
 *     init  <nvmlReturn_t>                           nvmlInit fails with it
 *     gpu   <name> <uuid> <mem_total> <mig_capable>  the next device
 *     mig   <uuid> <gi> <ci> <profile> <mem_total>   a MIG device of the last one (MIG mode on)
 *     frame <at>                                     values from <at> s after nvmlInit
 *     default <key> <value>                          a counter's value before any frame
 *     dev   <mem_used> <proc_util 0|1> <reserved> <clock event reason bits>
 *     counter <key> <value> <nvmlReturn_t>           a counter of the last dev (its key in
 *                                                    contract.gpu_counters, its value in NVML's
 *                                                    units) and how its query ends (0: it works)
 *     slice <mem_used> <reserved>                    the next MIG slice of the last dev
 *     fail  <what> <nvmlReturn_t>                    that query of the last dev or slice fails
 *     proc  <pid name> <mem|-> <sm|->                a compute process on the last dev or slice
 * Fields after a dev's <proc_util> may be left out (no reserve; no reason).
 */
#define _DEFAULT_SOURCE
#include "script.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINE 4096
#define MAX_FRAMES 100000
#define MAX_PROCS 1024

static const char *WHAT[FN_N_WHAT] = {"memory", "processes", "processes_v3", "proc_util", "memory_v2",
                                      "throttle"};
#define MAX_FIELDS 12

static void copy(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src ? src : "");
}

static long long num(const char *s) {
    return (s && strcmp(s, "-") != 0) ? strtoll(s, NULL, 10) : FN_NO_VALUE;
}

/* A field that may be left out: its value, else `dflt`. */
static unsigned long long opt(const char *s, unsigned long long dflt) {
    return (s && *s && strcmp(s, "-") != 0) ? strtoull(s, NULL, 10) : dflt;
}

static struct fn_dev *last_dev(struct fn_script *s) {
    if (s->nframes == 0) return NULL;
    struct fn_frame *f = &s->frames[s->nframes - 1];
    return f->ndevs ? &f->devs[f->ndevs - 1] : NULL;
}

static int add_frame(struct fn_script *s, const char *at) {
    if (s->nframes >= MAX_FRAMES) return -1;
    struct fn_frame *grown = realloc(s->frames, sizeof *grown * (size_t)(s->nframes + 1));
    if (!grown) return -1;
    s->frames = grown;
    memset(&grown[s->nframes], 0, sizeof *grown);
    grown[s->nframes++].at = strtod(at ? at : "0", NULL);
    return 0;
}

static int add_proc(struct fn_dev *d, char **f) {
    if (!d || d->nprocs >= MAX_PROCS || !f[1]) return -1;
    struct fn_proc *grown = realloc(d->procs, sizeof *grown * (size_t)(d->nprocs + 1));
    if (!grown) return -1;
    d->procs = grown;
    struct fn_proc *p = &grown[d->nprocs++];
    copy(p->spec, sizeof p->spec, f[1]);
    p->mem = num(f[2]);
    p->sm = num(f[3]);
    return 0;
}

/* A counter of d (the idle dev's: its default): key, value, and how its query ends. */
static int add_counter(struct fn_dev *d, char **f) {
    if (!d || d->ncounters >= FN_MAX_COUNTERS || !f[1] || !*f[1]) return -1;
    struct fn_counter *grown = realloc(d->counters, sizeof *grown * (size_t)(d->ncounters + 1));
    if (!grown) return -1;
    d->counters = grown;
    struct fn_counter *c = &grown[d->ncounters++];
    copy(c->key, sizeof c->key, f[1]);
    c->value = opt(f[2], 0);
    c->fail = (int)opt(f[3], 0);
    return 0;
}

static int set_fail(struct fn_dev *d, char **f) {
    if (!d || !f[1]) return -1;
    for (int w = 0; w < FN_N_WHAT; w++)
        if (strcmp(f[1], WHAT[w]) == 0) d->fail[w] = (int)num(f[2]);
    return 0;
}

static int add_gpu(struct fn_script *s, char **f) {
    if (s->ngpus >= FN_MAX_GPUS) return -1;
    struct fn_gpu *g = &s->gpus[s->ngpus++];
    copy(g->name, sizeof g->name, f[1]);
    copy(g->uuid, sizeof g->uuid, f[2]);
    g->mem_total = (unsigned long long)num(f[3]);
    g->mig_capable = f[4] && atoi(f[4]);
    return 0;
}

static struct fn_dev *add_dev(struct fn_script *s, char **f) {
    if (s->nframes == 0) return NULL;
    struct fn_frame *fr = &s->frames[s->nframes - 1];
    if (fr->ndevs >= FN_MAX_GPUS) return NULL;
    struct fn_dev *d = &fr->devs[fr->ndevs++];
    d->mem_used = (unsigned long long)num(f[1]);
    d->proc_util = f[2] && atoi(f[2]);
    d->reserved = opt(f[3], 0);
    d->throttle = opt(f[4], 0);
    return d;
}

/* The next slice of the last dev: its values, in the GPU's `mig` order. */
static struct fn_dev *add_slice(struct fn_script *s, char **f) {
    struct fn_dev *d = last_dev(s);
    if (!d || d->nslices >= FN_MAX_MIG) return NULL;
    struct fn_dev *grown = realloc(d->slices, sizeof *grown * (size_t)(d->nslices + 1));
    if (!grown) return NULL;
    d->slices = grown;
    struct fn_dev *sl = &grown[d->nslices++];
    memset(sl, 0, sizeof *sl);
    sl->mem_used = opt(f[1], 0);
    sl->reserved = opt(f[2], 0);
    return sl;
}

static int add_mig(struct fn_script *s, char **f) {
    if (s->ngpus == 0 || s->gpus[s->ngpus - 1].nmig >= FN_MAX_MIG) return -1;
    struct fn_gpu *g = &s->gpus[s->ngpus - 1];
    struct fn_mig *m = &g->mig[g->nmig];
    copy(m->uuid, sizeof m->uuid, f[1]);
    m->gi = (unsigned)opt(f[2], (unsigned long long)g->nmig + 1);
    m->ci = (unsigned)opt(f[3], 0);
    copy(m->profile, sizeof m->profile, f[4] && *f[4] ? f[4] : "1g.10gb");
    m->mem_total = opt(f[5], g->mem_total / 8);
    g->nmig++;
    return 0;
}

/* One record; *cur is the dev or slice that `fail` and `proc` records describe. */
static int record(struct fn_script *s, char **f, struct fn_dev **cur) {
    const char *kind = f[0];
    if (strcmp(kind, "init") == 0) return s->init_error = (int)num(f[1]), 0;
    if (strcmp(kind, "default") == 0) return add_counter(&s->idle, f);
    if (strcmp(kind, "counter") == 0) return add_counter(*cur, f);
    if (strcmp(kind, "gpu") == 0) return add_gpu(s, f);
    if (strcmp(kind, "mig") == 0) return add_mig(s, f);
    if (strcmp(kind, "frame") == 0) return *cur = NULL, add_frame(s, f[1]);
    if (strcmp(kind, "dev") == 0) return (*cur = add_dev(s, f)) ? 0 : -1;
    if (strcmp(kind, "slice") == 0) return (*cur = add_slice(s, f)) ? 0 : -1;
    if (strcmp(kind, "fail") == 0) return set_fail(*cur, f);
    if (strcmp(kind, "proc") == 0) return add_proc(*cur, f);
    return -1;
}

int fn_script_load(const char *path, struct fn_script *s) {
    memset(s, 0, sizeof *s);
    s->idle.proc_util = 1;
    FILE *in = path ? fopen(path, "r") : NULL;
    if (!in) return -1;
    char line[MAX_LINE];
    int ok = fgets(line, sizeof line, in) && strcmp(line, "mpwatch-nvml-stand-in 1\n") == 0;
    struct fn_dev *cur = NULL;
    while (ok && fgets(line, sizeof line, in)) {
        line[strcspn(line, "\n")] = '\0';
        char *f[MAX_FIELDS] = {0}, *rest = line;
        for (int i = 0; i < MAX_FIELDS && rest; i++) f[i] = strsep(&rest, "\t");
        ok = record(s, f, &cur) == 0;
    }
    fclose(in);
    if (!ok) fn_script_free(s);
    return ok ? 0 : -1;
}

void fn_script_free(struct fn_script *s) {
    for (int i = 0; i < s->nframes; i++)
        for (int d = 0; d < s->frames[i].ndevs; d++) {
            struct fn_dev *dev = &s->frames[i].devs[d];
            for (int k = 0; k < dev->nslices; k++) free(dev->slices[k].procs), free(dev->slices[k].counters);
            free(dev->slices);
            free(dev->procs);
            free(dev->counters);
        }
    free(s->frames);
    free(s->idle.counters);
    memset(s, 0, sizeof *s);
}

const struct fn_dev *fn_script_dev(const struct fn_script *s, double elapsed, int gpu) {
    /* Before any frame, or a frame listing fewer devices: the scripted NVML's defaults. */
    const struct fn_frame *cur = NULL;
    for (int i = 0; i < s->nframes; i++)
        if (s->frames[i].at <= elapsed) cur = &s->frames[i];  /* the last one passed, in order */
    return (cur && gpu < cur->ndevs) ? &cur->devs[gpu] : &s->idle;
}

const struct fn_dev *fn_script_slice(const struct fn_script *s, double elapsed, int gpu, int slot) {
    static const struct fn_dev empty = {0};
    const struct fn_dev *d = fn_script_dev(s, elapsed, gpu);
    return slot >= 0 && slot < d->nslices ? &d->slices[slot] : &empty;
}

const struct fn_counter *fn_counter_of(const struct fn_dev *d, const char *key) {
    for (int i = 0; d && i < d->ncounters; i++)
        if (strcmp(d->counters[i].key, key) == 0) return &d->counters[i];
    return NULL;
}

/* ---------------------------------------------------------------- pid names ---- */
static pid_t parent_of(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *close = strrchr(buf, ')');  /* the command name may hold spaces and parentheses */
    int ppid = 0;
    return (close && sscanf(close + 1, " %*c %d", &ppid) == 1) ? (pid_t)ppid : 0;
}

#define MAX_ENVIRON (4 << 20)

/* Its environment says MPWATCH_RANK=rank (any rank when rank is NULL). */
static int has_rank(pid_t pid, const char *rank) {
    char path[64], want[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int len = snprintf(want, sizeof want, "MPWATCH_RANK=%s", rank ? rank : "");
    FILE *f = fopen(path, "r");
    char *buf = f ? malloc(MAX_ENVIRON + 1) : NULL;
    if (!buf) {
        if (f) fclose(f);
        return 0;
    }
    size_t n = fread(buf, 1, MAX_ENVIRON, f);
    fclose(f);
    buf[n] = '\0';
    int found = 0;
    for (size_t i = 0; i < n && !found; i += strlen(buf + i) + 1)
        found = strncmp(buf + i, want, (size_t)len) == 0 && (!rank || buf[i + (size_t)len] == '\0');
    free(buf);
    return found;
}

/* The children of pid, lowest pid first (psutil's order); with rank set, only the one
 * whose environment says MPWATCH_RANK=rank. 0 if none. */
static pid_t child_of(pid_t pid, const char *rank) {
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    pid_t best = 0;
    struct dirent *e;
    while ((e = readdir(proc)) != NULL) {
        char *end;
        long p = strtol(e->d_name, &end, 10);
        if (*end || p <= 0 || parent_of((pid_t)p) != pid) continue;
        if ((best == 0 || p < best) && (!rank || has_rank((pid_t)p, rank))) best = (pid_t)p;
    }
    closedir(proc);
    return best;
}

long fn_pid_uid(pid_t pid) {
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    return stat(path, &st) == 0 ? (long)st.st_uid : -1;
}

/* A rank's worker: a child of pid, or a child of a child that is no rank's (the run's forkserver,
 * supervisor.preload, forks the workers). 0 if none. */
static pid_t rank_worker(pid_t pid, const char *rank) {
    pid_t worker = child_of(pid, rank);
    if (worker) return worker;
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    struct dirent *e;
    while (!worker && (e = readdir(proc)) != NULL) {
        char *end;
        long p = strtol(e->d_name, &end, 10);
        if (*end || p <= 0 || parent_of((pid_t)p) != pid || has_rank((pid_t)p, NULL)) continue;
        worker = child_of((pid_t)p, rank);
    }
    closedir(proc);
    return worker;
}

pid_t fn_resolve_pid(const char *spec) {
    if (strcmp(spec, "self") == 0) return getpid();
    if (strcmp(spec, "parent") == 0) return getppid();
    if (strncmp(spec, "rank:", 5) != 0) {
        char *end;
        long p = strtol(spec, &end, 10);
        return (*spec && !*end && p > 0) ? (pid_t)p : 0;
    }
    char rank[32];
    copy(rank, sizeof rank, spec + 5);
    char *slash = strchr(rank, '/');
    if (slash) *slash = '\0';
    pid_t worker = rank_worker(getpid(), rank);
    if (!worker || !slash) return worker;
    return strcmp(slash + 1, "child") == 0 ? child_of(worker, NULL) : 0;
}
