/*
 * abi_check.c: calls the simulated NVML library through NVML's C ABI where go-nvml cannot
 * (struct versions it does not know, NULL pointers, short buffers, calls out of order), for
 * TestLibraryABI. It runs on a node whose spec has two GPUs, the first with a fabric reading and
 * the second with none. Each unexpected return code is printed as "FAIL ..."; the readings are
 * printed as "<name> <value>" lines for the Go test to check.
 */
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
	unsigned char clusterUuid[16];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
} fabric_v1;

typedef struct {
	unsigned int version;
	unsigned char clusterUuid[16];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
	unsigned int healthMask;
} fabric_v2;

typedef struct {
	unsigned int version;
	unsigned char clusterUuid[16];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
	unsigned int healthMask;
	unsigned char healthSummary;
} fabric_v3;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, fabric_v1 *info);
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info);

enum { SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, INSUFFICIENT_SIZE = 7, VERSION_MISMATCH = 25 };

#define V2 ((unsigned int)(sizeof(fabric_v2) | 2U << 24))
#define V3 ((unsigned int)(sizeof(fabric_v3) | 3U << 24))

static int failures;

static void expect(const char *what, nvmlReturn_t got, nvmlReturn_t want)
{
	if (got != want) {
		printf("FAIL %s: returned %d (%s), want %d\n", what, got, nvmlErrorString(got), want);
		failures++;
	}
}

static void print_fabric(const char *name, const unsigned char *uuid, nvmlReturn_t status, unsigned int clique, unsigned char state)
{
	printf("%s %u %d ", name, state, status);
	for (int i = 0; i < 16; i++)
		printf("%02x", uuid[i]);
	printf(" %u\n", clique);
}

int main(void)
{
	char buf[96];
	unsigned int count = 0;
	nvmlDevice_t gpu0 = NULL, gpu1 = NULL, d = NULL;

	/* Before any init. */
	expect("count before init", nvmlDeviceGetCount_v2(&count), UNINITIALIZED);
	expect("driver version before init", nvmlSystemGetDriverVersion(buf, sizeof(buf)), UNINITIALIZED);
	expect("shutdown before init", nvmlShutdown(), UNINITIALIZED);
	expect("NVML version before init", nvmlSystemGetNVMLVersion(buf, sizeof(buf)), SUCCESS);
	printf("nvml %s\n", buf);

	/* Two inits: two shutdowns to undo them. */
	expect("init with flags", nvmlInitWithFlags(1), SUCCESS);
	expect("init", nvmlInit_v2(), SUCCESS);

	expect("driver version", nvmlSystemGetDriverVersion(buf, sizeof(buf)), SUCCESS);
	printf("driver %s\n", buf);
	expect("driver version, 1 byte", nvmlSystemGetDriverVersion(buf, 1), INSUFFICIENT_SIZE);
	expect("driver version, NULL", nvmlSystemGetDriverVersion(NULL, 80), INVALID_ARGUMENT);
	expect("count, NULL", nvmlDeviceGetCount_v2(NULL), INVALID_ARGUMENT);
	expect("count", nvmlDeviceGetCount_v2(&count), SUCCESS);
	printf("count %u\n", count);

	expect("handle 0", nvmlDeviceGetHandleByIndex_v2(0, &gpu0), SUCCESS);
	expect("handle 1", nvmlDeviceGetHandleByIndex_v2(1, &gpu1), SUCCESS);
	expect("handle 2", nvmlDeviceGetHandleByIndex_v2(2, &d), INVALID_ARGUMENT);
	expect("handle, NULL", nvmlDeviceGetHandleByIndex_v2(0, NULL), INVALID_ARGUMENT);

	expect("UUID, 40 bytes", nvmlDeviceGetUUID(gpu0, buf, 40), INSUFFICIENT_SIZE);
	expect("UUID, NULL", nvmlDeviceGetUUID(gpu0, NULL, 96), INVALID_ARGUMENT);
	expect("UUID, 41 bytes", nvmlDeviceGetUUID(gpu0, buf, 41), SUCCESS);
	printf("uuid0 %s\n", buf);
	expect("UUID of a made-up handle", nvmlDeviceGetUUID((nvmlDevice_t)(void *)buf, buf, 96), INVALID_ARGUMENT);
	expect("UUID of a handle off by a byte", nvmlDeviceGetUUID((nvmlDevice_t)((char *)gpu1 + 1), buf, 96), INVALID_ARGUMENT);
	expect("UUID of a NULL handle", nvmlDeviceGetUUID(NULL, buf, 96), INVALID_ARGUMENT);
	expect("name, 5 bytes", nvmlDeviceGetName(gpu0, buf, 5), INSUFFICIENT_SIZE);
	expect("name", nvmlDeviceGetName(gpu0, buf, 96), SUCCESS);
	printf("name %s\n", buf);

	fabric_v1 v1;
	memset(&v1, 0xff, sizeof(v1));
	expect("fabric v1", nvmlDeviceGetGpuFabricInfo(gpu0, &v1), SUCCESS);
	print_fabric("v1", v1.clusterUuid, v1.status, v1.cliqueId, v1.state);
	expect("fabric v1, NULL", nvmlDeviceGetGpuFabricInfo(gpu0, NULL), INVALID_ARGUMENT);
	expect("fabric v1, no fabric", nvmlDeviceGetGpuFabricInfo(gpu1, &v1), NOT_SUPPORTED);

	fabric_v2 v2;
	memset(&v2, 0xff, sizeof(v2));
	v2.version = V2;
	expect("fabric v2", nvmlDeviceGetGpuFabricInfoV(gpu0, &v2), SUCCESS);
	print_fabric("v2", v2.clusterUuid, v2.status, v2.cliqueId, v2.state);
	printf("v2 version %#x health %u\n", v2.version, v2.healthMask);
	expect("fabric v2, no fabric", nvmlDeviceGetGpuFabricInfoV(gpu1, &v2), NOT_SUPPORTED);

	fabric_v3 v3;
	memset(&v3, 0xff, sizeof(v3));
	v3.version = V3;
	expect("fabric v3", nvmlDeviceGetGpuFabricInfoV(gpu0, &v3), SUCCESS);
	print_fabric("v3", v3.clusterUuid, v3.status, v3.cliqueId, v3.state);
	printf("v3 version %#x health %u %u\n", v3.version, v3.healthMask, v3.healthSummary);

	v2.version = 0;
	expect("fabric, version 0", nvmlDeviceGetGpuFabricInfoV(gpu0, &v2), VERSION_MISMATCH);
	v2.version = (unsigned int)(sizeof(fabric_v2) | 1U << 24);
	expect("fabric, version 1", nvmlDeviceGetGpuFabricInfoV(gpu0, &v2), VERSION_MISMATCH);
	v2.version = (unsigned int)(sizeof(fabric_v2) | 4U << 24);
	expect("fabric, version 4", nvmlDeviceGetGpuFabricInfoV(gpu0, &v2), VERSION_MISMATCH);
	v2.version = (unsigned int)((sizeof(fabric_v2) + 4) | 2U << 24);
	expect("fabric, version 2 of another size", nvmlDeviceGetGpuFabricInfoV(gpu0, &v2), VERSION_MISMATCH);
	expect("fabric V, NULL", nvmlDeviceGetGpuFabricInfoV(gpu0, NULL), INVALID_ARGUMENT);

	expect("first shutdown", nvmlShutdown(), SUCCESS);
	expect("count after the first shutdown", nvmlDeviceGetCount_v2(&count), SUCCESS);
	expect("second shutdown", nvmlShutdown(), SUCCESS);
	expect("count after the second shutdown", nvmlDeviceGetCount_v2(&count), UNINITIALIZED);
	expect("UUID after the second shutdown", nvmlDeviceGetUUID(gpu0, buf, 96), UNINITIALIZED);
	expect("third shutdown", nvmlShutdown(), UNINITIALIZED);

	if (nvmlErrorString(12345) == NULL || nvmlErrorString(9) == NULL) {
		printf("FAIL nvmlErrorString returned NULL\n");
		failures++;
	}
	printf("driver-not-loaded %s\n", nvmlErrorString(9));
	return failures == 0 ? 0 : 1;
}
