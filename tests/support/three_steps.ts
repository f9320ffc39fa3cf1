/**
 * `Three`: three worker tasks in a row, each adding to its input, for the tests of commits with
 * an unknown outcome (tests/ambiguous_*_test.ts).
 */
export const WORKFLOW = {
  ir: "orbit-ir/1",
  name: "Three",
  version: "1.0.0",
  steps: [
    { id: "one", task: "t.one", contract: "1", input: "{% $input %}" },
    { id: "two", task: "t.two", contract: "1", input: "{% $steps.one %}" },
    { id: "three", task: "t.three", contract: "1", input: "{% $steps.two %}" },
    { id: "done", return: "{% $steps.three %}" },
  ],
};
export const TASKS = ["t.one", "t.two", "t.three"].map((name) => ({ name, contract: "1" }));
