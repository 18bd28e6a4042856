// fakenvml.c stands in for libnvidia-ml.so.1 in this package's tests. It
// exports what the package dlsyms, with the signatures of nvml.h (NVML
// 13.4.92), for a machine of two GPUs:
//
//   GPU 0 at 0000:1b:00.0 and GPU 1 at 0000:43:00.0, each with 4 NVLinks:
//   links 0 and 1 go to the other GPU, link 2 is down, link 3 goes to an
//   NVSwitch at 0000:05:00.0. NVLink P2P between them is OK.
//
// Like NVML, init and shutdown are counted and everything else fails with
// NVML_ERROR_UNINITIALIZED while the count is 0. FAKE_NVML_INIT_RETURN in
// the environment makes nvmlInit_v2 fail with that code. Built with
// -DFAKE_NVML_NO_P2P it lacks nvmlDeviceGetP2PStatus, like a driver too
// old for this package.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
};

typedef struct nvmlPciInfo_st {
	char busIdLegacy[16];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvml.h layout");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvml.h layout");

struct nvmlDevice_st {
	unsigned int bus;
	int peer; // index of the other GPU
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st gpus[2] = {{0x1b, 1}, {0x43, 0}};
enum { NUM_LINKS = 4, SWITCH_BUS = 0x05 };
static int inits;

static void fill_pci(nvmlPciInfo_t *pci, unsigned int bus, int sub) {
	memset(pci, 0, sizeof *pci);
	snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0, bus, 0);
	snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0, bus, 0);
	pci->bus = bus;
	pci->pciDeviceId = bus == SWITCH_BUS ? 0x22a310de : 0x233510de;
	if (sub) {
		pci->pciSubSystemId = 0x18be10de;
	}
}

static int valid(nvmlDevice_t d) { return d == &gpus[0] || d == &gpus[1]; }

nvmlReturn_t nvmlInit_v2(void) {
	const char *r = getenv("FAKE_NVML_INIT_RETURN");
	if (r != NULL && *r != '\0') {
		return atoi(r);
	}
	inits++;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
	if (inits == 0) {
		return NVML_ERROR_UNINITIALIZED;
	}
	inits--;
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	*n = 2;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	if (i >= 2) return NVML_ERROR_INVALID_ARGUMENT;
	*d = &gpus[i];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *d) {
	unsigned int domain, bus, dev, fn;
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	if (sscanf(id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < 2; i++) {
		if (domain == 0 && bus == gpus[i].bus && dev == 0 && fn == 0) {
			*d = &gpus[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
	fill_pci(pci, d->bus, 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *active) {
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d) || link >= NUM_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
	*active = link != 2; // NVML_FEATURE_ENABLED is 1
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *kind) {
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d) || link >= NUM_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
	*kind = link == 3 ? 2 : 0; // NVML_NVLINK_DEVICE_TYPE_SWITCH : _GPU
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci) {
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d) || link >= NUM_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
	fill_pci(pci, link == 3 ? SWITCH_BUS : gpus[d->peer].bus, 0);
	return NVML_SUCCESS;
}

#ifndef FAKE_NVML_NO_P2P
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t d1, nvmlDevice_t d2, int index, int *status) {
	if (inits == 0) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d1) || !valid(d2)) return NVML_ERROR_INVALID_ARGUMENT;
	// NVML_P2P_CAPS_INDEX_NVLINK is 2; NVML_P2P_STATUS_OK 0, _NOT_SUPPORTED 5.
	*status = index == 2 && d1 != d2 ? 0 : 5;
	return NVML_SUCCESS;
}
#endif
