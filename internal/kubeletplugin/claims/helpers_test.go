package claims

// testUID is a ComputeDomain UID for claims and configs.
const testUID = "0b7e3f4a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
