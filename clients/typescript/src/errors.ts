/** An error answer from Tern: `{"error": {"code", "message", ...details}}`. */
export class TernError extends Error {
  /** HTTP status (0 when the server could not be reached). */
  readonly status: number;
  /** Tern's snake_case error code, e.g. `condition_failed`, `not_found`. */
  readonly code: string;
  /** Extra fields of the error object (`current_version`, `position`, ...). */
  readonly details: Record<string, unknown>;

  constructor(status: number, code: string, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = "TernError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** Reads an error body into a `TernError`, whatever the body holds. */
export async function errorFrom(response: Response): Promise<TernError> {
  const text = await response.text();
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string } & Record<string, unknown> };
    if (body.error && typeof body.error.code === "string") {
      const { code, message, ...details } = body.error;
      return new TernError(response.status, code, String(message ?? code), details);
    }
  } catch {
    // not JSON: fall through
  }
  return new TernError(response.status, "http_error", `HTTP ${response.status}: ${text.slice(0, 200)}`);
}
