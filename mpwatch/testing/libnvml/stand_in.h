/* TEST-ONLY: what the stand-in libnvidia-ml.so.1's files share (testing.libnvml): the handles,
 * the script being played, and the lookups from a handle to its values now. stand_in.c
 * owns the state (start and stop, devices, memory); stand_in_counters.c, stand_in_procs.c,
 * stand_in_mig.c and stand_in_clocks.c answer the counter, process, MIG and clock reason calls
 * from it. Any thread may call. */
#ifndef MPWATCH_NVML_STAND_IN_H
#define MPWATCH_NVML_STAND_IN_H

#define _DEFAULT_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* define the _v2 and _v3 entry points by their own names */
#include <nvml.h>

#include <stddef.h>

#include "script.h"

#define EXPORT __attribute__((visibility("default")))
#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId / computeInstanceId outside MIG */

/* A handle: the device's index, and which MIG slot (-1: the GPU itself). */
struct nvmlDevice_st {
    int index;
    int mig;
};

extern int fn_inits;                 /* nvmlInit minus nvmlShutdown */
extern struct fn_script fn_script_now;
extern struct nvmlDevice_st fn_gpus[FN_MAX_GPUS], fn_migs[FN_MAX_GPUS][FN_MAX_MIG + 1];

/* Seconds since the first nvmlInit (the script's clock). */
double fn_elapsed(void);
/* Wall clock, seconds. */
double fn_wall(void);
/* The values of a GPU handle now, or NULL (not started, not a GPU handle). */
const struct fn_dev *fn_dev_of(nvmlDevice_t h);
/* A MIG device handle's spec and values now, or NULL (not started, not a MIG handle). */
const struct fn_mig *fn_mig_of(nvmlDevice_t h, const struct fn_dev **values);
/* A started handle of either kind. */
int fn_valid(nvmlDevice_t h);
/* The GPU of a handle is in MIG mode (it has instances). */
int fn_in_mig_mode(nvmlDevice_t h);
/* The caller may read what NVML keeps for root (a MIG GPU's whole memory and processes). */
int fn_privileged(void);

#endif
