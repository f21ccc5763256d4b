/** An error answer from Tern: `{"error": {"code", "message", ...details}}`. */
export declare class TernError extends Error {
    /** HTTP status (0 when the server could not be reached). */
    readonly status: number;
    /** Tern's snake_case error code, e.g. `condition_failed`, `not_found`. */
    readonly code: string;
    /** Extra fields of the error object (`current_version`, `position`, ...). */
    readonly details: Record<string, unknown>;
    constructor(status: number, code: string, message: string, details?: Record<string, unknown>);
}
/** Reads an error body into a `TernError`, whatever the body holds. */
export declare function errorFrom(response: Response): Promise<TernError>;
