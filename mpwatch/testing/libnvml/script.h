/* TEST-ONLY: the scenario a stand-in libnvidia-ml.so.1 plays (testing.libnvml). Shared by
 * script.c (reads it, resolves pid names) and stand_in.c (answers NVML's calls from it). */
#ifndef MPWATCH_NVML_STAND_IN_SCRIPT_H
#define MPWATCH_NVML_STAND_IN_SCRIPT_H

#include <sys/types.h>

#define FN_MAX_GPUS 32
#define FN_MAX_MIG 7 /* an A100/H100 holds at most 7 MIG instances */
#define FN_TEXT 96   /* NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define FN_NO_VALUE (-1LL)

/* The queries beyond the counters that can be told to fail (the script's `fail` records); a
 * counter's failure is its own record's. */
enum fn_what { FN_MEMORY, FN_PROCESSES, FN_PROCESSES_V3, FN_PROC_UTIL, FN_MEMORY_V2, FN_THROTTLE, FN_N_WHAT };

#define FN_KEY 32
#define FN_MAX_COUNTERS 64

struct fn_counter {  /* a counter of contract.gpu_counters, by its key */
    char key[FN_KEY];
    unsigned long long value;  /* in NVML's units (milliwatts, not watts) */
    int fail;                  /* an nvmlReturn_t, 0 where the query works */
};

struct fn_proc {
    char spec[40];  /* "1234", "self", "parent", "rank:N", "rank:N/child" */
    long long mem;  /* bytes; FN_NO_VALUE: the driver cannot tell (NVML_VALUE_NOT_AVAILABLE) */
    long long sm;   /* SM %; FN_NO_VALUE: no utilization sample for it */
};

struct fn_dev {  /* one GPU, or one MIG slice of it, in one frame */
    unsigned long long mem_used;  /* allocated: what nvmlMemory_v2_t calls used */
    unsigned long long reserved;  /* the driver's own share: v1's `used` counts it, v2 apart */
    unsigned long long throttle;  /* nvmlClocksEventReason* bits */
    int ncounters;            /* a GPU's counters (a slice has none of its own) */
    struct fn_counter *counters;
    int proc_util;            /* 0: the device keeps no per-process samples */
    int fail[FN_N_WHAT];      /* an nvmlReturn_t, 0 where the query works */
    int nprocs;
    struct fn_proc *procs;
    int nslices;              /* a GPU in MIG mode: its slices' values, in its `mig` order */
    struct fn_dev *slices;
};

struct fn_frame {
    double at;                /* seconds since nvmlInit from which this frame holds */
    int ndevs;
    struct fn_dev devs[FN_MAX_GPUS];
};

struct fn_mig {  /* a MIG device (a compute instance of a GPU instance) */
    char uuid[FN_TEXT], profile[32];
    unsigned gi, ci;          /* its GPU and compute instance ids */
    unsigned long long mem_total;
};

struct fn_gpu {
    char name[FN_TEXT], uuid[FN_TEXT];
    unsigned long long mem_total;
    int mig_capable;          /* 0: nvmlDeviceGetMigMode says NOT_SUPPORTED */
    int nmig;                 /* MIG mode is on when it has instances */
    struct fn_mig mig[FN_MAX_MIG];
};

struct fn_script {
    int init_error;           /* an nvmlReturn_t for nvmlInit, 0 to start */
    struct fn_dev idle;       /* a GPU's values before any frame, or past a frame's devices */
    int ngpus;
    struct fn_gpu gpus[FN_MAX_GPUS];
    int nframes;
    struct fn_frame *frames;
};

/* Read the script at path; 0 on success, -1 (script freed) on a bad or unreadable file. */
int fn_script_load(const char *path, struct fn_script *s);
void fn_script_free(struct fn_script *s);
/* The device values now: the last frame whose `at` has passed (defaults before any). */
const struct fn_dev *fn_script_dev(const struct fn_script *s, double elapsed, int gpu);
/* A MIG slice's values now (defaults before any frame or past the frame's slices). */
const struct fn_dev *fn_script_slice(const struct fn_script *s, double elapsed, int gpu, int slot);
/* A device's counter by its key (contract.gpu_counters), or NULL where the script has none. */
const struct fn_counter *fn_counter_of(const struct fn_dev *d, const char *key);
/* A scenario pid name resolved now, as testing.nvml.scenario_pid does; 0 if none. */
pid_t fn_resolve_pid(const char *spec);
/* The owner of a live process (its /proc entry's uid); -1 if unknown. */
long fn_pid_uid(pid_t pid);

#endif
