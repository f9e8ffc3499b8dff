/** The gateway's routing cache (src/gateway/routing.ts): a change is seen by the next request, however it meets a load in flight. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { deleteEndpoint, deployEndpoint, saveEndpoint } from "../../src/endpoints/store.ts";
import { Router } from "../../src/gateway/routing.ts";
import { type TinyGateway, startTinyGateway } from "../helpers/gateway.ts";

let tiny: TinyGateway;
let router: Router;

beforeAll(async () => {
  tiny = await startTinyGateway();
  router = new Router(tiny.ctl);
  await router.start();
});

afterAll(async () => {
  await router?.close();
  await tiny?.stop();
});

describe("Router", () => {
  it("does not let a load that read before a change stand for that change", async () => {
    const base = await deployEndpoint(tiny.ctl, DeploymentConfig.parse({ model: { name: "tiny" }, endpoint: "base" }));
    for (let i = 0; i < 5; i++) {
      const name = `late-${i}`;
      // A load is in flight: its reads went out on the control connection just before the write,
      // and the change is noticed before that load has answered.
      router.changed();
      const inFlight = router.endpoints();
      const saved = saveEndpoint(tiny.ctl, { ...base, name, config: { ...base.config, endpoint: name } });
      router.changed();
      expect((await router.resolve(name)).endpoint.name).toBe(name);
      expect((await inFlight).map((e) => e.name)).not.toContain(name);
      await saved;

      router.changed();
      const before = router.endpoints();
      const deleted = deleteEndpoint(tiny.ctl, name);
      router.changed();
      await expect(router.resolve(name)).rejects.toMatchObject({ status: 404, code: "model_not_found" });
      expect((await before).map((e) => e.name)).toContain(name);
      expect(await deleted).toBe(true);
    }
  });

  it("sees a change made elsewhere through its change notice", async () => {
    await router.endpoints();
    await deployEndpoint(tiny.ctl, DeploymentConfig.parse({ model: { name: "tiny" }, endpoint: "noticed" }));
    await expect.poll(async () => (await router.endpoints()).map((e) => e.name)).toContain("noticed");
  });
});
