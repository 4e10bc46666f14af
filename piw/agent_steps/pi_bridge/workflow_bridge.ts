/**
 * piw bridge extension for Pi (`agent-steps.md` §8.4): registers the `workflow` tool inside a Pi RPC process.
 *
 * Why a bridge: Pi owns the model loop, but the gate and the acceptance of a step's output belong to piw.
 * The gate is decided in code from the state file named by PIW_BRIDGE_STATE (written by piw before every
 * prompt and read here on `before_agent_start`), never from prompt text. The bridge only checks that a call
 * is well formed and addressed to the active step and attempt; piw reads the arguments from
 * `tool_execution_start` and validates the output in Python. A well-formed `submit` terminates the batch so a
 * first-try submission costs exactly one model request; if piw rejects it, piw sends the rejection as a prompt.
 * While the gate is closed the tool is left out of every request (not merely deactivated, which would make Pi
 * answer a stray call with its own "not found" text instead of the §3.2 text).
 *
 * No imports: Pi loads this file as-is, and plain JSON Schema keeps it independent of Pi's bundled libraries.
 */

import { readFileSync } from "node:fs";

const TOOL = "workflow";
const ASSISTANT_STEP_SUBMIT =
	"This step completes with a normal assistant response. Do not submit workflow output.";
const GATE_CLOSED = "The workflow tool is not available on this turn.";

interface BridgeState {
	completion?: "submit" | "assistant" | null;
	step?: string;
	attempt?: string;
	tools?: string[];
}

function readState(): BridgeState {
	const path = process.env.PIW_BRIDGE_STATE;
	if (!path) return {};
	try {
		return JSON.parse(readFileSync(path, "utf8")) as BridgeState;
	} catch {
		return {};
	}
}

function text(value: string): { type: "text"; text: string } {
	return { type: "text", text: value };
}

export default function (pi: any) {
	let state: BridgeState = readState();

	pi.registerTool({
		name: TOOL,
		label: "Workflow",
		description:
			"Finish the active workflow step (action 'submit' with your output) or report progress without " +
			"finishing (action 'update').",
		parameters: {
			type: "object",
			additionalProperties: false,
			required: ["action"],
			properties: {
				action: { type: "string", enum: ["submit", "update", "status"] },
				step: { type: "string" },
				attempt: { type: "string" },
				output: { description: "The step result (any JSON value)." },
				update: { type: "object" },
			},
		},
		async execute(_id: string, params: any) {
			const action = params && typeof params === "object" ? params.action : undefined;
			if (state.completion === "assistant" && action === "submit") throw new Error(ASSISTANT_STEP_SUBMIT);
			if (state.completion !== "submit") throw new Error(GATE_CLOSED);
			if (action === "status") {
				const details = { nodeId: state.step, attemptId: state.attempt };
				return { content: [text(JSON.stringify(details))], details };
			}
			if (action !== "submit" && action !== "update") {
				throw new Error("Invalid workflow tool call: action must be one of submit, update, status");
			}
			if (params.step !== state.step) {
				throw new Error(`Step ${params.step} is not active. The active step is ${state.step}.`);
			}
			if (params.attempt !== state.attempt) {
				throw new Error(
					`Attempt ${params.attempt} is stale. The active attempt for step ${state.step} is ${state.attempt}.`,
				);
			}
			if (action === "update") {
				if (!params.update || typeof params.update !== "object") {
					throw new Error("Invalid workflow tool call: update: Field required");
				}
				return { content: [text("Update received.")], details: {} };
			}
			if (!("output" in params)) throw new Error("Invalid workflow tool call: output: Field required");
			return { content: [text(`Output received for step ${state.step}.`)], details: {}, terminate: true };
		},
	});

	// Pi answers a call to an inactive tool with its own "not found" text, so the tool stays active and is
	// removed from each request while the gate is closed: it is never offered, and a call anyway reaches
	// execute() above, which answers with the exact §3.2 text.
	pi.on("before_provider_request", (event: any) => {
		const payload = event?.payload;
		if (state.completion === "submit" || !payload || !Array.isArray(payload.tools)) return undefined;
		const tools = payload.tools.filter((tool: any) => (tool?.function?.name ?? tool?.name) !== TOOL);
		if (tools.length === payload.tools.length) return undefined;
		const { tools: _dropped, tool_choice: _choice, ...rest } = payload;
		return tools.length > 0 ? { ...rest, tools } : rest;
	});

	pi.on("before_agent_start", async () => {
		state = readState();
		pi.setActiveTools([...new Set([...(state.tools ?? []), TOOL])]);
		return undefined;
	});
}
