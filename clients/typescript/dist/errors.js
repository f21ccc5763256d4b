/** An error answer from Tern: `{"error": {"code", "message", ...details}}`. */
export class TernError extends Error {
    /** HTTP status (0 when the server could not be reached). */
    status;
    /** Tern's snake_case error code, e.g. `condition_failed`, `not_found`. */
    code;
    /** Extra fields of the error object (`current_version`, `position`, ...). */
    details;
    constructor(status, code, message, details = {}) {
        super(message);
        this.name = "TernError";
        this.status = status;
        this.code = code;
        this.details = details;
    }
}
/** Reads an error body into a `TernError`, whatever the body holds. */
export async function errorFrom(response) {
    const text = await response.text();
    try {
        const body = JSON.parse(text);
        if (body.error && typeof body.error.code === "string") {
            const { code, message, ...details } = body.error;
            return new TernError(response.status, code, String(message ?? code), details);
        }
    }
    catch {
        // not JSON: fall through
    }
    return new TernError(response.status, "http_error", `HTTP ${response.status}: ${text.slice(0, 200)}`);
}
