import { defineDomain } from '../gateway.js';
import { consoleRoutes } from './routes.js';

/** Domain module of src/console/: the browser console (notifications, fleet and device pages) under /console. */
export const consoleDomain = defineDomain({
  name: 'console',
  async routes(app) {
    await consoleRoutes(app);
  },
});
