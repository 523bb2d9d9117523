/*
 * nvml_sim.c: the NVML library (libnvidia-ml.so.1) of a cdplane simulated node.
 *
 * It is a real shared library, exporting NVML's entry points under their exact names and with
 * their ABI (as NVIDIA's nvml.h declares them and go-nvml calls them), so that the kubelet
 * plugin's real NVML code (go-nvml: dlopen by full path, InitWithFlags, DeviceGetCount, ...)
 * runs in the simulated cluster as it runs on a GPU node. nvmlsim.BuildLibrary compiles it;
 * nodehost.InstallDriverRoot installs it in each simulated node's driver root as the NVIDIA
 * driver installs its own: usr/lib/<triplet>/libnvidia-ml.so.<version> and the link
 * libnvidia-ml.so.1.
 *
 * The library answers as the node it runs on. Every nvmlInit* reads the node's spec afresh,
 * NVML_SIM_CONF_PATH below the directory that the environment variable NVML_SIM_NODE_DIR_ENV
 * names (the simulated kubelet sets it on every container), so that a fabric that changes under
 * a running plugin is seen at its next discovery, as a real GPU's fabric state changes under a
 * running driver. BuildLibrary defines both names, and MAX_GPUS and MAX_LINE, from the Go
 * constants.
 * Without the variable, or without the file, init fails with NVML_ERROR_DRIVER_NOT_LOADED, as on
 * a machine without the NVIDIA driver; a malformed file fails it with NVML_ERROR_UNKNOWN and a
 * message on stderr naming the file and the line.
 *
 * The spec (nvmlsim.RenderConf writes it) is text, one directive a line:
 *
 *   # comment
 *   nvml-sim 1
 *   driver 580.82.07
 *   gpus 2
 *   gpu 0 GPU-baf94112-6428-5dec-b2f6-e9520e11834c fabric COMPLETED 0 7ff2eff4-c69a-58e9-a3c7-5790858155b6 1
 *   gpu 1 GPU-4835810b-34db-5d3f-8771-0a883ea5e8c4 nofabric
 *
 * Rules, all enforced (anything else is malformed):
 *   - Every line ends in a newline, the last one included, and holds at most MAX_LINE bytes
 *     before it; no NUL byte anywhere.
 *   - An empty line, or one that starts with '#', is ignored. Other lines are fields of
 *     printable ASCII (no space, tab or CR), separated by single spaces, with no space at
 *     either end.
 *   - Directives come in this order:
 *       nvml-sim 1        the format's version; first.
 *       driver <version>  the driver version (nvmlSystemGetDriverVersion): at least two numbers
 *                         of decimal digits separated by single dots, under 80 bytes.
 *       unavailable       optional: nvmlInit* fails with NVML_ERROR_DRIVER_NOT_LOADED, as on a
 *                         node whose driver cannot be reached.
 *       gpus <n>          the GPU count, 0 to MAX_GPUS.
 *       gpu <i> <uuid> <fabric>
 *                         exactly n of them, i = 0, 1, ... in order. <uuid> is "GPU-" and a
 *                         canonical UUID in lower case. <fabric> is "nofabric" (the fabric
 *                         info calls answer NVML_ERROR_NOT_SUPPORTED) or
 *                         "fabric <state> <status> <clusterUUID> <cliqueId>": the raw
 *                         nvmlGpuFabricInfo reading. <state> is NOT_SUPPORTED, NOT_STARTED,
 *                         IN_PROGRESS, COMPLETED or a number to 255; <status> an nvmlReturn_t
 *                         number; <clusterUUID> a canonical UUID in lower case; <cliqueId> a
 *                         number.
 *   - Numbers are decimal, without sign or leading zero, and fit their field (32 bits unless
 *     said otherwise).
 *
 * Init is reference counted as NVML's is; each init reads the spec again and, when it is good,
 * replaces what the library answers. Device handles point into a fixed table, so a handle taken
 * before a re-read stays safe to pass (it answers NVML_ERROR_INVALID_ARGUMENT once the node has
 * fewer GPUs). Every entry point holds one lock.
 *
 * A process loads a shared library once per path, and once its symbols are bound it keeps
 * calling the first library that defined them: the simulator's in-process mode, where one
 * process serves many nodes, keeps a Go stand-in instead (nodehost).
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef NVML_SIM_NODE_DIR_ENV
#error "NVML_SIM_NODE_DIR_ENV must name the node directory's environment variable (nvmlsim.BuildLibrary defines it)"
#endif
#ifndef NVML_SIM_CONF_PATH
#error "NVML_SIM_CONF_PATH must be the spec's path below the node directory (nvmlsim.BuildLibrary defines it)"
#endif
#if !defined(NVML_SIM_MAX_GPUS) || !defined(NVML_SIM_MAX_LINE)
#error "NVML_SIM_MAX_GPUS and NVML_SIM_MAX_LINE must be nvmlsim.MaxGPUs and the longest line (nvmlsim.BuildLibrary defines them)"
#endif

#define EXPORT __attribute__((visibility("default")))

/* nvmlReturn_t, with nvml.h's values for the codes this library returns. */
typedef enum nvmlReturn_enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

/* nvmlDevice_t is a pointer to an opaque struct, as in nvml.h; here, to an entry of a table. */
struct nvmlDevice_st {
	unsigned char unused;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

#define FABRIC_UUID_LEN 16

/* nvmlGpuFabricInfo_t: what nvmlDeviceGetGpuFabricInfo fills. */
typedef struct {
	unsigned char clusterUuid[FABRIC_UUID_LEN];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
} nvmlGpuFabricInfo_t;

/* nvmlGpuFabricInfo_v2_t and _v3_t: what nvmlDeviceGetGpuFabricInfoV fills, by the version the
 * caller set in their first field. */
typedef struct {
	unsigned int version;
	unsigned char clusterUuid[FABRIC_UUID_LEN];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
	unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

typedef struct {
	unsigned int version;
	unsigned char clusterUuid[FABRIC_UUID_LEN];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
	unsigned int healthMask;
	unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;

/* NVML's struct version: the struct's size, and the version in the top byte. */
#define STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((unsigned int)(ver) << 24U)))
#define FABRIC_INFO_V2 STRUCT_VERSION(nvmlGpuFabricInfo_v2_t, 2)
#define FABRIC_INFO_V3 STRUCT_VERSION(nvmlGpuFabricInfo_v3_t, 3)

/* The layouts go-nvml's Go structs have (GpuFabricInfo, GpuFabricInfo_v2, GpuFabricInfo_v3). */
_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t layout");
_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t layout");
_Static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40, "nvmlGpuFabricInfo_v3_t layout");
_Static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is 32 bits");

#define MAX_GPUS NVML_SIM_MAX_GPUS
#define MAX_LINE NVML_SIM_MAX_LINE
#define MAX_FIELDS 8
#define DRIVER_VERSION_SIZE 80
#define GPU_UUID_LEN 40      /* "GPU-" and 36 */
#define UUID_LEN 36
#define GPU_NAME "NVIDIA GB200"

/* One GPU of the spec. */
struct sim_gpu {
	char uuid[GPU_UUID_LEN + 1];
	int fabric; /* 0: the fabric info calls answer NVML_ERROR_NOT_SUPPORTED */
	unsigned char state;
	unsigned int status;
	unsigned char cluster[FABRIC_UUID_LEN];
	unsigned int clique;
};

/* The spec: what the library answers. */
struct sim_node {
	char driver[DRIVER_VERSION_SIZE];
	int unavailable;
	unsigned int gpus;
	struct sim_gpu gpu[MAX_GPUS];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned int refcount;     /* inits not yet shut down; under mu */
static struct sim_node node;      /* the spec read by the last good init; under mu */
static struct sim_node loading;   /* the spec being read; under mu */
static struct nvmlDevice_st devices[MAX_GPUS]; /* handle i is &devices[i] */

/* ---- Reading the spec ---- */

enum parse_state { P_HEADER, P_DRIVER, P_GPUS, P_GPU };

struct parser {
	const char *path;
	unsigned long line;
	enum parse_state state;
	unsigned int next; /* the next GPU index expected */
	struct sim_node *out;
};

/* malformed reports the spec's current line as malformed, on stderr, and returns
 * NVML_ERROR_UNKNOWN. */
__attribute__((format(printf, 2, 3)))
static nvmlReturn_t malformed(const struct parser *p, const char *format, ...)
{
	va_list ap;
	fprintf(stderr, "nvml-sim: %s:%lu: ", p->path, p->line);
	va_start(ap, format);
	vfprintf(stderr, format, ap);
	va_end(ap);
	fputc('\n', stderr);
	return NVML_ERROR_UNKNOWN;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* parse_number reads a decimal number without sign or leading zero, at most max. */
static int parse_number(const char *s, unsigned long max, unsigned long *out)
{
	unsigned long v = 0;
	size_t n = strlen(s);
	if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!is_digit(s[i]))
			return 0;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v > max)
		return 0;
	*out = v;
	return 1;
}

/* dotted_version: at least two runs of digits separated by single dots. */
static int dotted_version(const char *s)
{
	int parts = 1, digits = 0;
	for (; *s; s++) {
		if (is_digit(*s)) {
			digits++;
		} else if (*s == '.' && digits > 0) {
			parts++;
			digits = 0;
		} else {
			return 0;
		}
	}
	return parts >= 2 && digits > 0;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* parse_uuid reads a canonical UUID (8-4-4-4-12 hex digits) in lower case. */
static int parse_uuid(const char *s, unsigned char out[FABRIC_UUID_LEN])
{
	if (strlen(s) != UUID_LEN)
		return 0;
	int b = 0;
	for (int i = 0; i < UUID_LEN;) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return 0;
			i++;
			continue;
		}
		int hi = hex_value(s[i]), lo = hex_value(s[i + 1]);
		if (hi < 0 || lo < 0)
			return 0;
		out[b++] = (unsigned char)(hi << 4 | lo);
		i += 2;
	}
	return 1;
}

static int parse_state_field(const char *s, unsigned char *out)
{
	static const char *const names[] = {"NOT_SUPPORTED", "NOT_STARTED", "IN_PROGRESS", "COMPLETED"};
	for (unsigned char i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return 1;
		}
	}
	unsigned long v;
	if (!parse_number(s, 255, &v))
		return 0;
	*out = (unsigned char)v;
	return 1;
}

/* parse_gpu reads "gpu <i> <uuid> nofabric" or "gpu <i> <uuid> fabric <state> <status>
 * <clusterUUID> <cliqueId>". */
static nvmlReturn_t parse_gpu(struct parser *p, char **f, int nf)
{
	unsigned long index, v;
	unsigned char cluster[FABRIC_UUID_LEN];
	if (p->next == p->out->gpus)
		return malformed(p, "%s after the last of the %u GPUs", f[0], p->out->gpus);
	if (strcmp(f[0], "gpu") != 0)
		return malformed(p, "want \"gpu %u ...\", got %s", p->next, f[0]);
	if (nf < 4 || !parse_number(f[1], MAX_GPUS, &index) || index != p->next)
		return malformed(p, "want \"gpu %u <uuid> <fabric>\"", p->next);
	struct sim_gpu *g = &p->out->gpu[p->next];
	memset(g, 0, sizeof(*g));
	if (strncmp(f[2], "GPU-", 4) != 0 || !parse_uuid(f[2] + 4, cluster))
		return malformed(p, "GPU %u: UUID %s is not \"GPU-\" and a canonical UUID in lower case", p->next, f[2]);
	memcpy(g->uuid, f[2], GPU_UUID_LEN + 1);
	if (strcmp(f[3], "nofabric") == 0) {
		if (nf != 4)
			return malformed(p, "GPU %u: nothing may follow nofabric", p->next);
	} else if (strcmp(f[3], "fabric") == 0) {
		if (nf != 8)
			return malformed(p, "GPU %u: want \"fabric <state> <status> <clusterUUID> <cliqueId>\"", p->next);
		g->fabric = 1;
		if (!parse_state_field(f[4], &g->state))
			return malformed(p, "GPU %u: fabric state %s: want NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS, COMPLETED or a number to 255", p->next, f[4]);
		if (!parse_number(f[5], UINT32_MAX, &v))
			return malformed(p, "GPU %u: fabric status %s: want a number", p->next, f[5]);
		g->status = (unsigned int)v;
		if (!parse_uuid(f[6], g->cluster))
			return malformed(p, "GPU %u: cluster UUID %s: want a canonical UUID in lower case", p->next, f[6]);
		if (!parse_number(f[7], UINT32_MAX, &v))
			return malformed(p, "GPU %u: clique id %s: want a number", p->next, f[7]);
		g->clique = (unsigned int)v;
	} else {
		return malformed(p, "GPU %u: want nofabric or fabric, got %s", p->next, f[3]);
	}
	p->next++;
	return NVML_SUCCESS;
}

/* parse_directive reads one directive, its fields f[0..nf-1]. */
static nvmlReturn_t parse_directive(struct parser *p, char **f, int nf)
{
	unsigned long v;
	switch (p->state) {
	case P_HEADER:
		if (nf != 2 || strcmp(f[0], "nvml-sim") != 0)
			return malformed(p, "want \"nvml-sim 1\" first");
		if (strcmp(f[1], "1") != 0)
			return malformed(p, "format version %s: this library reads version 1", f[1]);
		p->state = P_DRIVER;
		return NVML_SUCCESS;
	case P_DRIVER:
		if (nf != 2 || strcmp(f[0], "driver") != 0)
			return malformed(p, "want \"driver <version>\" after the format version");
		if (strlen(f[1]) >= DRIVER_VERSION_SIZE || !dotted_version(f[1]))
			return malformed(p, "driver version %s: want numbers separated by dots, under %d bytes", f[1], DRIVER_VERSION_SIZE);
		memcpy(p->out->driver, f[1], strlen(f[1]) + 1);
		p->state = P_GPUS;
		return NVML_SUCCESS;
	case P_GPUS:
		if (nf == 1 && strcmp(f[0], "unavailable") == 0) {
			if (p->out->unavailable)
				return malformed(p, "unavailable twice");
			p->out->unavailable = 1;
			return NVML_SUCCESS;
		}
		if (nf != 2 || strcmp(f[0], "gpus") != 0)
			return malformed(p, "want \"unavailable\" or \"gpus <n>\" after the driver version");
		if (!parse_number(f[1], MAX_GPUS, &v))
			return malformed(p, "gpus %s: want a number to %d", f[1], MAX_GPUS);
		p->out->gpus = (unsigned int)v;
		p->state = P_GPU;
		return NVML_SUCCESS;
	case P_GPU:
		return parse_gpu(p, f, nf);
	}
	return malformed(p, "internal error: parser state %d", (int)p->state);
}

/* parse_line reads one line, its newline replaced by a NUL; len is its length before it. */
static nvmlReturn_t parse_line(struct parser *p, char *line, size_t len)
{
	char *f[MAX_FIELDS];
	int nf = 0;
	if (memchr(line, '\0', len) != NULL)
		return malformed(p, "NUL byte");
	if (len > MAX_LINE)
		return malformed(p, "line longer than %d bytes", MAX_LINE);
	if (len == 0 || line[0] == '#')
		return NVML_SUCCESS;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		if (c == ' ') {
			if (i == 0 || i == len - 1 || line[i - 1] == '\0')
				return malformed(p, "fields must be separated by single spaces, with none at either end");
			line[i] = '\0';
		} else if (c < 0x21 || c > 0x7e) {
			return malformed(p, "byte 0x%02x: fields are printable ASCII", c);
		} else if (i == 0 || line[i - 1] == '\0') {
			if (nf == MAX_FIELDS)
				return malformed(p, "more than %d fields", MAX_FIELDS);
			f[nf++] = &line[i];
		}
	}
	return parse_directive(p, f, nf);
}

/* load reads the spec into loading, as nvmlInit* does. */
static nvmlReturn_t load(void)
{
	const char *dir = getenv(NVML_SIM_NODE_DIR_ENV);
	if (dir == NULL || dir[0] == '\0') {
		fprintf(stderr, "nvml-sim: %s is not set: not on a simulated node, so there is no NVIDIA driver\n", NVML_SIM_NODE_DIR_ENV);
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	char path[4096];
	if ((size_t)snprintf(path, sizeof(path), "%s%s", dir, NVML_SIM_CONF_PATH) >= sizeof(path)) {
		fprintf(stderr, "nvml-sim: %s=%s: path too long\n", NVML_SIM_NODE_DIR_ENV, dir);
		return NVML_ERROR_UNKNOWN;
	}
	FILE *file = fopen(path, "r");
	if (file == NULL) {
		int err = errno;
		fprintf(stderr, "nvml-sim: %s: %s\n", path, strerror(err));
		if (err == ENOENT || err == ENOTDIR)
			return NVML_ERROR_DRIVER_NOT_LOADED;
		if (err == EACCES || err == EPERM)
			return NVML_ERROR_NO_PERMISSION;
		return NVML_ERROR_UNKNOWN;
	}
	memset(&loading, 0, sizeof(loading));
	struct parser p = {.path = path, .line = 0, .state = P_HEADER, .next = 0, .out = &loading};
	char *buf = NULL;
	size_t cap = 0;
	ssize_t n;
	nvmlReturn_t ret = NVML_SUCCESS;
	while (ret == NVML_SUCCESS && (n = getline(&buf, &cap, file)) > 0) {
		p.line++;
		if (buf[n - 1] != '\n') {
			ret = malformed(&p, "no newline at the end of the file");
			break;
		}
		buf[n - 1] = '\0';
		ret = parse_line(&p, buf, (size_t)n - 1);
	}
	if (ret == NVML_SUCCESS && ferror(file)) {
		fprintf(stderr, "nvml-sim: %s: reading: %s\n", path, strerror(errno));
		ret = NVML_ERROR_UNKNOWN;
	}
	free(buf);
	fclose(file);
	if (ret != NVML_SUCCESS)
		return ret;
	p.line++;
	if (p.state != P_GPU)
		return malformed(&p, "end of file before \"gpus <n>\"");
	if (p.next != loading.gpus)
		return malformed(&p, "end of file after %u of the %u GPUs", p.next, loading.gpus);
	return NVML_SUCCESS;
}

/* ---- NVML ---- */

static nvmlReturn_t init(void)
{
	pthread_mutex_lock(&mu);
	nvmlReturn_t ret = load();
	if (ret == NVML_SUCCESS && loading.unavailable)
		ret = NVML_ERROR_DRIVER_NOT_LOADED;
	if (ret == NVML_SUCCESS) {
		node = loading;
		refcount++;
	}
	pthread_mutex_unlock(&mu);
	return ret;
}

/* Every flag is accepted: the simulated driver initialises with or without GPUs, as with
 * NVML_INIT_FLAG_NO_GPUS. */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	(void)flags;
	return init();
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(); }
EXPORT nvmlReturn_t nvmlInit(void) { return init(); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	if (refcount == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (--refcount == 0)
		memset(&node, 0, sizeof(node));
	pthread_mutex_unlock(&mu);
	return ret;
}

/* nvmlErrorString describes a return code in a few words of its own (NVML's differ). */
EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	switch ((int)result) {
	case 0: return "success";
	case 1: return "NVML is not initialised";
	case 2: return "invalid argument";
	case 3: return "not supported";
	case 4: return "no permission";
	case 5: return "already initialised";
	case 6: return "not found";
	case 7: return "buffer too small";
	case 8: return "insufficient power";
	case 9: return "NVIDIA driver not loaded";
	case 10: return "timed out";
	case 11: return "interrupt request issue";
	case 12: return "NVML library not found";
	case 13: return "function not found";
	case 14: return "infoROM corrupted";
	case 15: return "GPU lost";
	case 16: return "GPU reset required";
	case 17: return "blocked by the operating system";
	case 18: return "NVML and kernel driver versions differ";
	case 19: return "in use";
	case 20: return "out of memory";
	case 21: return "no data";
	case 22: return "vGPU ECC not supported";
	case 23: return "insufficient resources";
	case 24: return "frequency not supported";
	case 25: return "struct version not supported";
	case 26: return "deprecated";
	case 27: return "not ready";
	case 28: return "GPU not found";
	case 29: return "invalid state";
	case 30: return "reset type not supported";
	default: return "unknown error";
	}
}

/* copy_string copies s into buf of length, NUL terminated. */
static nvmlReturn_t copy_string(char *buf, unsigned int length, const char *s)
{
	if (buf == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	size_t n = strlen(s);
	if ((size_t)length < n + 1)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, n + 1);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	pthread_mutex_lock(&mu);
	nvmlReturn_t ret = refcount == 0 ? NVML_ERROR_UNINITIALIZED : copy_string(version, length, node.driver);
	pthread_mutex_unlock(&mu);
	return ret;
}

/* The NVML version is the CUDA major version the driver goes with, then the driver version:
 * "13.580.82.07" for driver 580 and later, "12.<version>" before. It needs no init, as NVML's;
 * before one, the spec is read for it. */
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	pthread_mutex_lock(&mu);
	const char *driver = node.driver;
	nvmlReturn_t ret = NVML_SUCCESS;
	if (refcount == 0) {
		ret = load();
		driver = loading.driver;
	}
	if (ret == NVML_SUCCESS) {
		char v[DRIVER_VERSION_SIZE + 8];
		snprintf(v, sizeof(v), "%s.%s", strtoul(driver, NULL, 10) >= 580 ? "13" : "12", driver);
		ret = copy_string(version, length, v);
	}
	pthread_mutex_unlock(&mu);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	if (refcount == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (deviceCount == NULL)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else
		*deviceCount = node.gpus;
	pthread_mutex_unlock(&mu);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	if (refcount == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (device == NULL || index >= node.gpus)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else
		*device = &devices[index];
	pthread_mutex_unlock(&mu);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* gpu_of returns the GPU a handle names, under mu, or sets *ret. */
static const struct sim_gpu *gpu_of(nvmlDevice_t device, nvmlReturn_t *ret)
{
	uintptr_t d = (uintptr_t)device, first = (uintptr_t)&devices[0];
	if (refcount == 0) {
		*ret = NVML_ERROR_UNINITIALIZED;
		return NULL;
	}
	if (d < first || d >= first + sizeof(devices) || (d - first) % sizeof(devices[0]) != 0 ||
	    (d - first) / sizeof(devices[0]) >= node.gpus) {
		*ret = NVML_ERROR_INVALID_ARGUMENT;
		return NULL;
	}
	return &node.gpu[(d - first) / sizeof(devices[0])];
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	const struct sim_gpu *g = gpu_of(device, &ret);
	if (g != NULL)
		ret = copy_string(uuid, length, g->uuid);
	pthread_mutex_unlock(&mu);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	if (gpu_of(device, &ret) != NULL)
		ret = copy_string(name, length, GPU_NAME);
	pthread_mutex_unlock(&mu);
	return ret;
}

/* The deprecated first fabric info call (R535 and later, deprecated since 13.0). */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	const struct sim_gpu *g = gpu_of(device, &ret);
	if (g == NULL) {
		/* ret is set */
	} else if (info == NULL) {
		ret = NVML_ERROR_INVALID_ARGUMENT;
	} else if (!g->fabric) {
		ret = NVML_ERROR_NOT_SUPPORTED;
	} else {
		memset(info, 0, sizeof(*info));
		memcpy(info->clusterUuid, g->cluster, FABRIC_UUID_LEN);
		info->status = (nvmlReturn_t)g->status;
		info->cliqueId = g->clique;
		info->state = g->state;
	}
	pthread_mutex_unlock(&mu);
	return ret;
}

/* The versioned fabric info call (R550 and later): it fills the struct version the caller set,
 * 2 or 3, and refuses any other with NVML_ERROR_ARGUMENT_VERSION_MISMATCH. The health fields
 * are zero: no degradation known. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	const struct sim_gpu *g = gpu_of(device, &ret);
	unsigned int version = 0;
	if (info != NULL)
		memcpy(&version, info, sizeof(version));
	if (g == NULL) {
		/* ret is set */
	} else if (info == NULL) {
		ret = NVML_ERROR_INVALID_ARGUMENT;
	} else if (version != FABRIC_INFO_V2 && version != FABRIC_INFO_V3) {
		ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	} else if (!g->fabric) {
		ret = NVML_ERROR_NOT_SUPPORTED;
	} else if (version == FABRIC_INFO_V2) {
		nvmlGpuFabricInfo_v2_t v2;
		memset(&v2, 0, sizeof(v2));
		v2.version = version;
		memcpy(v2.clusterUuid, g->cluster, FABRIC_UUID_LEN);
		v2.status = (nvmlReturn_t)g->status;
		v2.cliqueId = g->clique;
		v2.state = g->state;
		memcpy(info, &v2, sizeof(v2));
	} else {
		nvmlGpuFabricInfo_v3_t v3;
		memset(&v3, 0, sizeof(v3));
		v3.version = version;
		memcpy(v3.clusterUuid, g->cluster, FABRIC_UUID_LEN);
		v3.status = (nvmlReturn_t)g->status;
		v3.cliqueId = g->clique;
		v3.state = g->state;
		memcpy(info, &v3, sizeof(v3));
	}
	pthread_mutex_unlock(&mu);
	return ret;
}
