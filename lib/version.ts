export const RUNTIME_VERSION = "0.1.0";
export const API_VERSION = "orbit-api/1";
